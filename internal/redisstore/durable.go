package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durable acknowledgement (DQ_REDIS_REPLICA_ACKS, docs/design.md "Durable
// acknowledgement").
//
// Redis replication is asynchronous: a write the primary answered can be
// gone after a replica that had not received it is promoted. With
// Options.ReplicaAcks = n > 0, every script whose result is reported to
// someone or relied on afterwards (durableScripts: schedule, reschedule,
// cancel, redrive, delete of a dead task, the worker's finish, park and
// unpark) is followed, on the same connection, by WAIT n timeout (and
// WAITAOF 1 n timeout with Options.WaitAOF): Redis answers WAIT once the
// replicas acknowledged every write that connection made, so one WAIT
// covers a whole pipeline of script calls (the cost is one round trip to
// the replicas per pipeline, not per task). When fewer than n replicas
// confirm in time the call's result stands on the primary but its
// survival of a failover is unknown: the call fails with a *ReplicaError
// (ErrNotReplicated), which IsUnavailable counts as "Redis cannot serve
// now". The daemon journals such a schedule (the replay is idempotent) and
// answers a reschedule or cancel 503; the worker finishes again before it
// commits the record's offset.
//
// The connection matters: WAIT counts the writes of its own connection
// only. A pipeline on a *redis.Client runs on one connection; on a Redis
// Cluster the WAIT goes in a pipeline with its script to the master of the
// script's slot (ClusterClient.MasterForKey), whose client bypasses the
// cluster client's redirect handling: a MOVED or an unreachable node
// there reloads the cluster client's slot map (ReloadState) and the call
// is sent again through retryMigrating.

// ErrNotReplicated is a write that ran on the Redis primary but that fewer
// replicas than Options.ReplicaAcks confirmed within Options.AckTimeout: a
// failover may still undo it, so its outcome is unknown.
var ErrNotReplicated = errors.New("the replicas did not confirm the write in time: its outcome is unknown")

// ReplicaError is ErrNotReplicated with the figures.
type ReplicaError struct {
	Want, Got int    // replicas asked for, replicas that confirmed
	AOF       bool   // WAITAOF: Got counts replicas that fsynced their AOF
	Local     bool   // WAITAOF: the primary's own AOF fsync was not confirmed
	Addr      string // the primary
}

func (e *ReplicaError) Error() string {
	what := "replicas"
	if e.AOF {
		what = "replicas (AOF fsynced)"
	}
	if e.Local {
		return fmt.Sprintf("the primary %s did not confirm its AOF fsync in time: the write's outcome is unknown", e.Addr)
	}
	return fmt.Sprintf("%d of %d %s of %s confirmed the write in time: its outcome is unknown", e.Got, e.Want, what, e.Addr)
}

func (e *ReplicaError) Unwrap() error { return ErrNotReplicated }

// durableScripts are the scripts whose result is reported or relied on:
// with ReplicaAcks > 0 each call waits for the replicas.
// TestDurableScripts keeps the list in step with the design.
func durableScripts() []*redis.Script {
	return []*redis.Script{scheduleScript, rescheduleScript, cancelScript, redriveScript, purgeDeadScript,
		finishScript, parkScript, unparkScript}
}

var durable = func() map[string]bool {
	m := make(map[string]bool)
	for _, sc := range durableScripts() {
		m[sc.Hash()] = true
	}
	return m
}()

// waits reports whether a call of sc must wait for the replicas.
func (s *Store) waits(sc *redis.Script) bool {
	return (s.acks > 0 || s.waitAOF) && durable[sc.Hash()]
}

// waitCmds appends WAIT (and WAITAOF) to a pipeline.
type waitCmds struct {
	wait, aof *redis.Cmd
}

func (s *Store) queueWait(ctx context.Context, p redis.Pipeliner) waitCmds {
	var w waitCmds
	// (Pipeliner has no Wait method; the commands are built by hand)
	ms := max(s.ackTimeout.Milliseconds(), 1)
	if s.waitAOF {
		w.aof = p.Do(ctx, "waitaof", 1, s.acks, ms)
	} else {
		w.wait = p.Do(ctx, "wait", s.acks, ms)
	}
	return w
}

// check turns the WAIT answer into nil or a *ReplicaError (or the WAIT's
// own error: a connection lost after the scripts ran is just as unknown).
func (w waitCmds) check(addr string, want int) error {
	if w.aof != nil {
		v, err := w.aof.Int64Slice()
		if err != nil {
			return fmt.Errorf("waitaof: %w", err)
		}
		if len(v) != 2 {
			return fmt.Errorf("waitaof: unexpected answer %v", v)
		}
		if v[0] < 1 {
			return &ReplicaError{Want: want, Got: int(v[1]), AOF: true, Local: true, Addr: addr}
		}
		if int(v[1]) < want {
			return &ReplicaError{Want: want, Got: int(v[1]), AOF: true, Addr: addr}
		}
		return nil
	}
	n, err := w.wait.Int64()
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	if int(n) < want {
		return &ReplicaError{Want: want, Got: int(n), Addr: addr}
	}
	return nil
}

// primaryFor is the client of the primary that holds key: the store's own
// client for one redis-server (or a Sentinel-managed primary), the
// master's node client on a Redis Cluster.
func (s *Store) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("replica acks: unsupported redis client %T", s.rdb)
}

// followCluster asks a cluster client to read its slot map again after a
// node client answered MOVED or could not be reached: the node clients of
// the durable path bypass the cluster client, which would otherwise only
// learn of a failover from its own calls.
func (s *Store) followCluster(ctx context.Context, err error) {
	if c, ok := s.rdb.(*redis.ClusterClient); ok && err != nil && (isMigrating(err) || IsUnavailable(err)) {
		c.ReloadState(ctx)
	}
}

// runWaited runs one script call and WAIT in one pipeline on the primary
// of its slot (EVAL after NOSCRIPT).
func (s *Store) runWaited(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	c, err := s.primaryFor(ctx, keys[0])
	if err != nil {
		s.followCluster(ctx, err)
		return nil, err
	}
	var cmd *redis.Cmd
	var w waitCmds
	send := func(eval bool) {
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if eval {
				cmd = sc.Eval(ctx, scripterFor(sc, p), keys, args...)
			} else {
				cmd = sc.EvalSha(ctx, scripterFor(sc, p), keys, args...)
			}
			w = s.queueWait(ctx, p)
			return nil
		})
	}
	send(false)
	if isNoScript(cmd.Err()) {
		send(true)
	}
	v, err := cmd.Result()
	if err != nil {
		s.followCluster(ctx, err)
		return v, err
	}
	if err := w.check(c.Options().Addr, s.acks); err != nil {
		s.followCluster(ctx, err)
		return v, err
	}
	return v, nil
}

// execWaited is execCalls for a durable script on one redis-server: every
// call and one WAIT in one pipeline (on a Redis Cluster, execEach sends
// each call alone through runScript, which waits after it).
func (s *Store) execWaited(ctx context.Context, sc *redis.Script, calls []*shardCall) {
	c, err := s.primaryFor(ctx, "")
	if err != nil {
		for _, call := range calls {
			call.err = err
		}
		return
	}
	todo := calls
	for attempt := 0; attempt < 2 && len(todo) > 0; attempt++ {
		var w waitCmds
		eval := attempt > 0
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, call := range todo {
				if eval {
					call.cmd = sc.Eval(ctx, scripterFor(sc, p), call.keys, call.args...)
				} else {
					call.cmd = sc.EvalSha(ctx, scripterFor(sc, p), call.keys, call.args...)
				}
			}
			w = s.queueWait(ctx, p)
			return nil
		})
		werr := w.check(c.Options().Addr, s.acks)
		var again []*shardCall
		for _, call := range todo {
			call.val, call.err = call.cmd.Result()
			if isNoScript(call.err) && !eval {
				again = append(again, call)
				continue
			}
			if errors.Is(call.err, redis.Nil) {
				call.val, call.err = nil, nil
			}
			if call.err == nil && werr != nil {
				call.err = werr
			}
		}
		todo = again
	}
}

// checkWaitAOF refuses Options.WaitAOF on a Redis without WAITAOF (before
// 7.2), naming the setting.
func (s *Store) checkWaitAOF(ctx context.Context) error {
	if !s.waitAOF {
		return nil
	}
	c, err := s.primaryFor(ctx, s.k.meta)
	if err != nil {
		return fmt.Errorf("check WAITAOF: %w", err)
	}
	err = c.WaitAOF(ctx, 1, 0, time.Millisecond).Err() // numlocal 1: refused also when appendonly is off
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		return fmt.Errorf("%w: DQ_REDIS_WAIT_AOF needs WAITAOF (Redis 7.2 or later): %s answered %q",
			ErrUnsupported, c.Options().Addr, err.Error())
	}
	if err != nil && strings.Contains(err.Error(), "appendonly") {
		return fmt.Errorf("%w: DQ_REDIS_WAIT_AOF needs appendonly yes on the primary: %s answered %q",
			ErrUnsupported, c.Options().Addr, err.Error())
	}
	if err != nil {
		return fmt.Errorf("check WAITAOF: %w", err)
	}
	return nil
}

// ErrUnsupported is a setting the Redis server cannot serve.
var ErrUnsupported = errors.New("redis does not support a setting")
