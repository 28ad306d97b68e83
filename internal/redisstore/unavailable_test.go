package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// A Redis that refuses writes for a while (maxmemory reached with
// noeviction, a script running too long) answers with an error about
// itself, not about the task: IsUnavailable must say so, or callers treat
// an ordinary operational fault as bad input or poison.
func TestRefusalsOfARealRedisAreUnavailable(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, "pad", string(make([]byte, 1<<20)), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.ConfigSet(ctx, "maxmemory", "0").Err() })

	write := redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)
	for name, err := range map[string]error{
		"plain write":  rdb.Set(ctx, "k", "v", 0).Err(),
		"script write": write.Run(ctx, rdb, []string{"k"}, "v").Err(),
		"script write with its body": rdb.Eval(ctx, `redis.call('GET', KEYS[1]); return redis.call('SET', KEYS[1], ARGV[1])`,
			[]string{"k"}, "v").Err(),
	} {
		if err == nil {
			t.Fatalf("%s: Redis accepted a write above maxmemory", name)
		}
		if !IsUnavailable(err) {
			t.Errorf("%s: %q is not classified as unavailable", name, err)
		}
	}
}

func TestAnswersAboutTheDataAreNotUnavailable(t *testing.T) {
	for _, err := range []error{
		errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"),
		errors.New("ERR Error running script (call to f_1): @user_script:3: user_script:3: bad argument"),
		redis.Nil,
	} {
		if IsUnavailable(err) {
			t.Errorf("%q classified as unavailable", err)
		}
	}
	for _, msg := range []string{
		"OOM command not allowed when used memory > 'maxmemory'.",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
		"NOREPLICAS Not enough good replicas to write.",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"READONLY You can't write against a read only replica.",
		"LOADING Redis is loading the dataset in memory",
		"CLUSTERDOWN The cluster is down",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"ERR Error running script (call to f_9): @user_script:12: -OOM command not allowed when used memory > 'maxmemory'.",
	} {
		if !IsUnavailable(errors.New(msg)) {
			t.Errorf("%q not classified as unavailable", msg)
		}
	}
}

// A write whose outcome is unknown (it may have run) is told from one that
// certainly did not run, for the daemon's journal: the replay of a write
// that may have run never writes it again over a later change.
func TestNotRun(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("schedule on shard 3: %w", dial), true},
		{fmt.Errorf("schedule: %w", redis.ErrPoolTimeout), true},
		{errors.New("READONLY You can't write against a read only replica"), true},
		{errors.New("CLUSTERDOWN The cluster is down"), true},
		{fmt.Errorf("x: %w", read), false},
		{io.EOF, false},
		{context.DeadlineExceeded, false},
		{&ReplicaError{Want: 1}, false},
	} {
		if got := NotRun(tc.err); got != tc.want {
			t.Errorf("NotRun(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
