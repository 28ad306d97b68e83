package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster slot migration (a master added or removed, slots resharded).
//
// While a hash slot moves, CLUSTER SETSLOT IMPORTING/MIGRATING and MIGRATE
// split its keys between two masters for a while. Redis then answers a
// command about that slot, before running it:
//
//   - on the source, when all its keys are there: runs it;
//   - on the source, when none is there: ASK <slot> <target>;
//   - on the source, when some are (7.0+), or on the target after ASKING
//     when a command of several keys finds some missing: TRYAGAIN;
//   - on a node whose map is older than the move, or the target without
//     ASKING: MOVED.
//
// go-redis' ClusterClient follows MOVED and ASK (with ASKING) and retries
// TRYAGAIN, but only MaxRedirects times (3 by default) about 10ms apart,
// and TRYAGAIN lasts as long as the slot migrates; it also sends a script
// it followed an ASK with to a target that may lack it (NOSCRIPT), which
// Script.Run answers with EVAL, which follows the ASK again. Every one of
// these answers means "not run, not now": runScript retries them, in one
// place, with a short backoff.
//
// A key count "missing" includes keys that never existed, so a command
// about a slot in migration is refused for the slot's whole migration
// unless every key it names exists on one side. That refusal is what keeps
// a script whole: Redis checks only the keys a script declares (KEYS). A
// script that reaches other keys of its slot (take, settle and fire
// poison find bucket hashes and lease keys from the shard's key prefix)
// fails in the middle when one of them has moved ("Script attempted to
// access a non local key", after its earlier writes were applied), and on
// the target after ASKING reads a key still on the source as absent. So
// runScript adds to the keys of those scripts (prefixScripts) a key of the
// same slot that is never written, slotGuard: no node ever holds every key
// of such a call while the slot migrates, Redis refuses it (TRYAGAIN) for
// as long as the slot moves, and it runs whole on the slot's owner once
// the move is over. The scripts ignore the extra key (they never read
// #KEYS). Scripts that name every key they touch need no guard: Redis
// runs them where all their keys are, or refuses them.
//
// A script error that means it ran in part ("non local key") is not
// retried: it is surfaced, because running it again could apply it twice.
//
// Pipelines: go-redis sends a node's whole batch of a pipeline again when
// the batch's first command answers a retryable error such as TRYAGAIN,
// the commands of that batch that had succeeded included (ClusterClient
// pipelineReadCmds, v9.23). A script call that succeeded would then run
// twice: a schedule would answer "unchanged" for the task it had just
// created, a finish "already succeeded" for its own outcome. So on a
// ClusterClient the batched calls (execCalls: schedule, claim, finish) go
// each as its own command, side by side (execEach); a single command is
// sent again only when it failed.

// The backoff of runScript: from migratingMinWait doubling up to
// migratingMaxWait between attempts, for at most migratingRetryFor in all.
const (
	migratingMinWait  = 5 * time.Millisecond
	migratingMaxWait  = 100 * time.Millisecond
	migratingRetryFor = 5 * time.Second
)

// migratingRetries counts the script calls (attempts) that a migrating
// slot refused and runScript sent again, in this process.
var migratingRetries atomic.Int64

// MigratingRetries is how many script calls were refused because their
// hash slot was migrating (TRYAGAIN, ASK, MOVED) and sent again, since the
// process started.
func MigratingRetries() int64 { return migratingRetries.Load() }

// isMigrating reports whether err is a Redis Cluster answer for a slot on
// the move (TRYAGAIN, ASK, MOVED, possibly wrapped): the command was
// refused before it ran, so sending it again is safe.
func isMigrating(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"TRYAGAIN", "ASK ", "MOVED "} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, ": "+p) {
			return true
		}
	}
	return false
}

// retryMigrating calls op until it returns anything but a migrating answer
// (isMigrating), waiting between attempts (migratingMinWait doubling to
// migratingMaxWait), for at most migratingRetryFor; then it returns the
// last answer. ctx ending stops the waiting: the last answer is returned.
func retryMigrating(ctx context.Context, op func() (any, error)) (any, error) {
	v, err := op()
	if !isMigrating(err) {
		return v, err
	}
	deadline := time.Now().Add(migratingRetryFor)
	wait := migratingMinWait
	for isMigrating(err) && time.Now().Add(wait).Before(deadline) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		wait = min(2*wait, migratingMaxWait)
		migratingRetries.Add(1)
		v, err = op()
	}
	return v, err
}

// prefixScripts reach keys they do not declare, from the shard's key
// prefix (see the comment at the top of this file); runScript guards them.
// TestPrefixScriptsAreGuarded keeps the list in step with the *.lua files.
func prefixScripts() []*redis.Script {
	return []*redis.Script{takeScript, settleScript, firePoisonScript, finishScript}
}

// guarded holds the hashes of prefixScripts.
var guarded = func() map[string]bool {
	m := make(map[string]bool)
	for _, sc := range prefixScripts() {
		m[sc.Hash()] = true
	}
	return m
}()

// slotGuardSuffix names the guard key inside a shard's hash tag.
const slotGuardSuffix = ":slotguard"

// slotGuard is the guard key of key's hash slot: the key's hash tag (up to
// its first "}") followed by slotGuardSuffix, e.g. "dq:{ns:3}:slotguard".
// Nothing ever writes it. It returns "" for a key without a hash tag.
func slotGuard(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[:i+1+j+1] + slotGuardSuffix
}

// runScript runs a script (EVALSHA, EVAL after NOSCRIPT) through
// retryMigrating, with the slot guard added to the keys of prefixScripts,
// and waits for the replicas after a durable script (durable.go).
func (s *Store) runScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	if len(keys) > 0 && guarded[sc.Hash()] {
		if g := slotGuard(keys[0]); g != "" {
			keys = append(keys[:len(keys):len(keys)], g)
		}
	}
	if s.waits(sc) {
		return retryMigrating(ctx, func() (any, error) { return s.runWaited(ctx, sc, keys, args...) })
	}
	return retryMigrating(ctx, func() (any, error) {
		return sc.Run(ctx, s.rdb, keys, args...).Result()
	})
}

// execEach runs each call as its own command through runScript, all at
// once, when the store's client is a ClusterClient (see the comment at the
// top of this file), and reports whether it did; the caller pipelines them
// otherwise.
func (s *Store) execEach(ctx context.Context, sc *redis.Script, calls []*shardCall) bool {
	if _, ok := s.rdb.(*redis.ClusterClient); !ok {
		return false
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			c.val, c.err = s.runScript(ctx, sc, c.keys, c.args...)
			if errors.Is(c.err, redis.Nil) {
				c.val, c.err = nil, nil
			}
		})
	}
	wg.Wait()
	return true
}
