package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Sent once.
//
// go-redis sends a command again after a failure it deems transient
// (MaxRetries on a node; a ClusterClient also to the slot's node again,
// then to a fresh pick) and returns the last attempt's error only. When
// the first attempt reached Redis and ran, and its node then died before
// it answered (a connection reset), the resend's dial is refused and the
// call fails with "connection refused": an error that, read alone, proves
// the command never ran (NotRun). The daemon journals a schedule that
// failed so as a never-written entry, and the journal's replay writes it
// again, over any change made meanwhile: a reschedule through another
// daemon was undone that way (the chaos suite, seed 794849177: the task
// fired at its first due time with the third generation).
//
// So the schedule script, whose errors the daemon reads with NotRun, is
// sent at most once by go-redis (a command's NoRetry flag): its error is
// the one attempt's, and NotRun tells the truth. go-redis still follows
// MOVED, ASK and READONLY and re-sends a command it never wrote (all
// refusals or failures before the write); the store's own retries
// (retryMigrating) send it again only after a refusal. The other scripts
// keep go-redis' retries: their callers read every failure as an unknown
// outcome. TestScheduleThatRanIsNeverReportedNotRun covers each path (a
// pipeline, a pipeline with WAIT, a Redis Cluster command).
var sentOnce = map[string]bool{scheduleScript.Hash(): true}

// onceCmd is a script call go-redis sends at most once.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// scriptRunner is a client or a pipeline: it runs scripts and commands.
type scriptRunner interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// scripterFor is c for sc's calls: one that sends them at most once for a
// script of sentOnce, c itself for the others.
func scripterFor(sc *redis.Script, c scriptRunner) redis.Scripter {
	if !sentOnce[sc.Hash()] {
		return c
	}
	return onceScripter{Scripter: c, c: c}
}

// onceScripter sends EVAL and EVALSHA as onceCmd.
type onceScripter struct {
	redis.Scripter
	c scriptRunner
}

func (o onceScripter) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "eval", src, keys, args)
}

func (o onceScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "evalsha", sha, keys, args)
}

// send builds the call as go-redis' Eval does (the store's arguments are
// scalars: nothing to flatten) and sends it through c.
func (o onceScripter) send(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = o.c.Process(ctx, onceCmd{cmd})
	return cmd
}
