package redisstore

import (
	"errors"
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
