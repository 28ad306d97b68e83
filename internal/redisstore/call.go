package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The one call path of the store's Lua scripts. A transition file (take,
// settle, claim, finish, park, ...) builds its keys and arguments and
// reads its reply; everything between is here:
//
//   - loading: script() makes a transition's script from its .lua file and
//     the part of common.lua it uses (the prelude, below);
//   - one call: run and runScript send EVALSHA, EVAL after NOSCRIPT, again
//     while a Redis Cluster slot migrates (retryMigrating), with the slot
//     guard of the scripts that reach undeclared keys, and wait for the
//     replicas after a durable script (durable.go);
//   - many items: chunks groups items by shard, at most maxPerCall a call;
//     packCalls puts the shards' sections into script calls; execCalls
//     sends them in one pipeline (each alone on a Redis Cluster, execEach);
//     fanOut hands a call's error to each of its items.

// maxPerCall bounds the tasks one script call handles (Redis runs scripts
// one at a time; long ones stall every other client).
const maxPerCall = 200

//go:embed common.lua
var commonLua string

// script is a transition's script: the definitions of common.lua that src
// uses (prelude), then src. A dqplant build may rewrite src first
// (plantBugs, plant_on.go); a normal build never does.
func script(src string) *redis.Script {
	name := scriptName(src)
	src = plantBugs(src)
	sc := redis.NewScript(prelude(commonDefs, src) + "\n" + src)
	scriptNames[sc.Hash()] = name
	return sc
}

// scriptNames maps the SHA1 of each script made by script to its name,
// written while the package's variables are initialised and only read
// after (ScriptNames).
var scriptNames = map[string]string{}

// scriptName is a transition's name: the first word of its .lua file,
// whose first line reads "-- <name>: what it does".
func scriptName(src string) string {
	line, _, _ := strings.Cut(src, "\n")
	f := strings.Fields(strings.TrimPrefix(line, "--"))
	if len(f) == 0 {
		return "?"
	}
	return strings.TrimSuffix(f[0], ":")
}

// ScriptNames maps the SHA1 that EVALSHA names each of the store's
// scripts by (as Redis' SLOWLOG and MONITOR show it) to the script's
// name: "claim", "take", ... (bench/cmd/scale -redis-scripts reads the
// SLOWLOG by it).
func ScriptNames() map[string]string { return maps.Clone(scriptNames) }

// A script is common.lua's helpers followed by the script's own source.
// Redis runs a script's body from the top on every call, so each helper
// of common.lua is a closure made anew per call: all of them cost about
// 3 µs of redis-server CPU per call on the 2-vCPU VM, as much as the
// call's own dispatch. prelude keeps only the top-level definitions a
// script uses, directly or through another helper, in common.lua's order
// (a Lua local must be defined before the code that names it).
//
// A definition is a top-level "local" statement of common.lua (a "local
// function" up to its "end" at column 0, or a one-line "local name = ...");
// a script uses it when the name appears in its source as a word (a name
// inside a comment or a string only costs a closure). The definitions
// are read once (commonDefs); prelude runs once per script, at init.
type preludeDef struct {
	name string
	src  string
}

var (
	localDef = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`)
	luaWord  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// preludeDefs splits common.lua into its top-level definitions: a
// "local function" runs to the first "end" at column 0, any other "local"
// statement is one line. Anything else outside a definition but blank
// lines and comments panics (at init: every test that opens a store
// fails): it would be dropped from every script without a word.
func preludeDefs(common string) []preludeDef {
	var defs []preludeDef
	inFunc := false
	for line := range strings.Lines(common) {
		if inFunc {
			defs[len(defs)-1].src += line
			inFunc = strings.TrimRight(line, "\n") != "end"
			continue
		}
		m := localDef.FindStringSubmatch(line)
		switch {
		case m != nil:
			defs = append(defs, preludeDef{name: m[1], src: line})
			inFunc = strings.HasPrefix(line, "local function ")
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "--"):
		default:
			panic("redisstore: common.lua: a top-level statement that is not a local definition: " + line)
		}
	}
	if inFunc {
		panic("redisstore: common.lua: the last function has no end at column 0")
	}
	return defs
}

// prelude is the part of common.lua that src needs.
func prelude(defs []preludeDef, src string) string {
	index := make(map[string]int, len(defs))
	for i, d := range defs {
		index[d.name] = i
	}
	need := make([]bool, len(defs))
	var visit func(text string)
	visit = func(text string) {
		for _, w := range luaWord.FindAllString(text, -1) {
			if i, ok := index[w]; ok && !need[i] {
				need[i] = true
				visit(defs[i].src)
			}
		}
	}
	visit(src)
	var b strings.Builder
	for i, d := range defs {
		if need[i] {
			b.WriteString(d.src)
		}
	}
	return b.String()
}

var commonDefs = preludeDefs(commonLua)

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

// MigratingRetries is how many of this store's script calls were refused
// because their hash slot was migrating (TRYAGAIN, ASK, MOVED) and sent
// again (retryMigrating), since New.
func (s *Store) MigratingRetries() int64 { return s.migratingRetries.Load() }

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
// Each attempt sent again counts in s.MigratingRetries.
func (s *Store) retryMigrating(ctx context.Context, op func() (any, error)) (any, error) {
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
		s.migratingRetries.Add(1)
		v, err = op()
	}
	return v, err
}

// prefixScripts reach keys they do not declare, from the shard's key
// prefix (see "Redis Cluster slot migration" above); runScript guards them.
// TestPrefixScriptsAreGuarded keeps the list in step with the *.lua files.
func prefixScripts() []*redis.Script {
	return []*redis.Script{takeScript, settleScript, firePoisonScript, finishScript, censusScript, censusLoadScript}
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
		return s.retryMigrating(ctx, func() (any, error) { return s.runWaited(ctx, sc, keys, args...) })
	}
	return s.retryMigrating(ctx, func() (any, error) {
		return sc.Run(ctx, scripterFor(sc, s.rdb), keys, args...).Result()
	})
}

// execEach runs each call as its own command through runScript, all at
// once, when the store's client is a ClusterClient (see "Pipelines" under
// "Redis Cluster slot migration" above), and reports whether it did; the
// caller pipelines them otherwise.
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

// run runs a script with EVALSHA, falling back to EVAL when Redis lost its
// script cache, and sends it again while its Redis Cluster slot migrates
// (runScript); a nil reply is nil, not an error.
func (s *Store) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	v, err := s.runScript(ctx, sc, keys, args...)
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// shardCall is one script call over the items of one shard (of several
// for schedule: shards then holds each item's).
type shardCall struct {
	shard  int
	idx    []int
	shards []int
	keys   []string
	args   []any
	cmd    *redis.Cmd
	val    any
	err    error
}

// where names the call's shard, or shards, for an error.
func (c *shardCall) where() string {
	seen := slices.Compact(slices.Sorted(slices.Values(c.shards)))
	if len(seen) <= 1 {
		return fmt.Sprintf("shard %d", c.shard)
	}
	return fmt.Sprintf("shards %v", seen)
}

// fail wraps err with op and the call's shards ("claim on shard 3: ...")
// and gives it to each item of the call (set); it returns the wrapped
// error.
func (c *shardCall) fail(op string, err error, set func(i int, err error)) error {
	err = fmt.Errorf("%s on %s: %w", op, c.where(), err)
	for _, i := range c.idx {
		set(i, err)
	}
	return err
}

// fanOut reads the replies of calls that execCalls sent: read takes a
// call's reply apart into its items' results; a call that failed, or
// whose reply read refuses, fails each of its items instead (fail, set).
// It returns the first such error.
func fanOut(calls []*shardCall, op string, read func(c *shardCall) error, set func(i int, err error)) error {
	var first error
	for _, c := range calls {
		err := c.err
		if err == nil {
			err = read(c)
		}
		if err == nil {
			continue
		}
		if err = c.fail(op, err, set); first == nil {
			first = err
		}
	}
	return first
}

// chunk is items of one key, at most maxPerCall of them.
type chunk[K comparable] struct {
	key K
	idx []int
}

// chunks groups items (indexes into the caller's slice) by key, at most
// maxPerCall per chunk, in order of first appearance.
func chunks[K comparable](items []int, key func(i int) K) []*chunk[K] {
	var out []*chunk[K]
	open := make(map[K]*chunk[K])
	for _, i := range items {
		k := key(i)
		c := open[k]
		if c == nil || len(c.idx) == maxPerCall {
			c = &chunk[K]{key: k}
			open[k] = c
			out = append(out, c)
		}
		c.idx = append(c.idx, i)
	}
	return out
}

// indexes is 0..n-1, the items of a whole slice of n (see chunks).
func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// packCalls puts sections (one shard's items each) into script calls:
// with single (a client of one redis-server, see Store.single), as many
// sections as fit maxPerCall items share a call, since the per-call cost
// of a script is about twice an item's; with any other client (a Redis
// Cluster's), each section is a call of its own, as a script's keys share
// one slot there. Every call's arguments start with head; section appends
// one section's keys and arguments to c. The calls' idx and shards list
// their items in order.
func packCalls[K comparable](single bool, secs []*chunk[K], shardOf func(K) int, head []any, section func(sec *chunk[K], c *shardCall)) []*shardCall {
	var calls []*shardCall
	var c *shardCall
	for _, sec := range secs {
		sh := shardOf(sec.key)
		if c == nil || !single || len(c.idx)+len(sec.idx) > maxPerCall {
			c = &shardCall{shard: sh, args: slices.Clone(head)}
			calls = append(calls, c)
		}
		section(sec, c)
		c.idx = append(c.idx, sec.idx...)
		for range sec.idx {
			c.shards = append(c.shards, sh)
		}
	}
	return calls
}

// packShards is packCalls for sections keyed by their shard (claims,
// finishes, releases, parks).
func (s *Store) packShards(secs []*chunk[int], head []any, section func(sec *chunk[int], c *shardCall)) []*shardCall {
	return packCalls(s.pack, secs, func(sh int) int { return sh }, head, section)
}

// execCalls sends every call in one pipeline (EVALSHA), re-sending a call
// with EVAL after NOSCRIPT, and stores each call's reply or error. On Redis
// Cluster each call goes alone instead (execEach).
func (s *Store) execCalls(ctx context.Context, sc *redis.Script, calls []*shardCall) {
	if s.execEach(ctx, sc, calls) { // a durable script waits in runScript
		return
	}
	if s.waits(sc) {
		s.execWaited(ctx, sc, calls) // durable.go
		return
	}
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			c.cmd = sc.EvalSha(ctx, scripterFor(sc, p), c.keys, c.args...)
		}
		return nil
	})
	for _, c := range calls {
		c.val, c.err = c.cmd.Result()
		if isNoScript(c.err) {
			c.val, c.err = sc.Run(ctx, scripterFor(sc, s.rdb), c.keys, c.args...).Result()
		}
		if errors.Is(c.err, redis.Nil) {
			c.val, c.err = nil, nil
		}
	}
}
