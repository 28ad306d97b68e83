package testenv

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedisConfig(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	c := r.Client(t)
	want := map[string]string{
		"save":                      "",
		"appendonly":                "no",
		"maxmemory-policy":          "noeviction",
		"hash-max-listpack-value":   "512",
		"hash-max-listpack-entries": "256",
		"bind":                      "127.0.0.1",
		"protected-mode":            "no",
		"daemonize":                 "no",
		"dir":                       r.Dir,
	}
	for k, v := range want {
		got, err := c.ConfigGet(t.Context(), k).Result()
		if err != nil {
			t.Fatalf("CONFIG GET %s: %v", k, err)
		}
		if got[k] != v {
			t.Errorf("CONFIG GET %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestRedisKillRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	c := r.Client(t)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := r.Addr

	r.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	r.Kill(t) // idempotent

	r.Restart(t)
	if r.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, r.Addr)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Kill+Restart without AOF: err = %v, want redis.Nil", err)
	}
}

func TestRedisAOFSurvivesKillAndStop(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, RedisOptions{AOF: true, Password: "s3cret"})
	c := r.Client(t)
	ctx := t.Context()

	got, err := c.ConfigGet(ctx, "appendfsync").Result()
	if err != nil || got["appendfsync"] != "always" {
		t.Fatalf("CONFIG GET appendfsync = %v, %v; want always", got, err)
	}
	noAuth := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer noAuth.Close()
	if err := noAuth.Ping(ctx).Err(); err == nil ||
		!strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without password: err = %v, want NOAUTH", err)
	}

	for i, crash := range []func(testing.TB){r.Kill, r.Stop} {
		key := "k" + string(rune('0'+i))
		if err := c.HSet(ctx, key, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		crash(t)
		r.Restart(t)
		v, err := c.HGet(ctx, key, "f").Result()
		if err != nil || v != "v" {
			t.Fatalf("round %d: HGET %s after restart = %q, %v; want v", i, key, v, err)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rc := StartRedisCluster(t)
	t.Logf("cluster ready in %v", time.Since(start))
	if len(rc.Addrs) != 3 {
		t.Fatalf("Addrs = %v, want 3", rc.Addrs)
	}
	c := rc.Client(t)
	ctx := t.Context()

	// {a}, {b} and {c} hash to slots 15495, 3300 and 7365: one per master.
	keys := []string{"{a}:x", "{b}:x", "{c}:x"}
	owners := map[string]bool{}
	for _, k := range keys {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		node, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		owners[node.Options().Addr] = true
	}
	if len(owners) != 3 {
		t.Errorf("keys %v landed on %d masters, want 3", keys, len(owners))
	}
	for _, k := range keys {
		if v, err := c.Get(ctx, k).Result(); err != nil || v != k {
			t.Errorf("GET %s = %q, %v", k, v, err)
		}
	}
	cfg, err := c.ConfigGet(ctx, "hash-max-listpack-value").Result()
	if err != nil || cfg["hash-max-listpack-value"] != "512" {
		t.Errorf("cluster node CONFIG GET hash-max-listpack-value = %v, %v", cfg, err)
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	n := 0
	WaitFor(t, time.Second, "n reaches 3", func() bool { n++; return n >= 3 })
	if FreePort(t) <= 0 {
		t.Fatal("FreePort returned a non-positive port")
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, so a test can check how a helper fails.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartRedisMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, start := range map[string]func(testing.TB){
		"StartRedis":        func(tb testing.TB) { StartRedis(tb) },
		"StartRedisCluster": func(tb testing.TB) { StartRedisCluster(tb) },
	} {
		rec := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			start(rec)
		}()
		<-done
		if !strings.Contains(rec.msg, "not found in PATH: apt-get install redis-server") {
			t.Errorf("%s without redis in PATH: Fatalf(%q), want an install hint", name, rec.msg)
		}
	}
}
