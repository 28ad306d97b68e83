package config_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/testenv"
)

// logBuf collects a logger's lines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// haClient is RedisClientHA with its log collected and its metrics in a
// registry of their own.
func haClient(t *testing.T, c config.Common) (redis.UniversalClient, *prometheus.Registry, *logBuf) {
	t.Helper()
	logs := new(logBuf)
	rdb, ha, err := c.RedisClientHA(slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(ha)
	return rdb, reg, logs
}

// counter is the value of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// prober writes key through rdb in a loop until stopped, and notes the
// first success after arm.
type prober struct {
	armed   atomic.Bool
	firstOK atomic.Int64 // unix ns of the first success once armed
	fails   atomic.Int64 // failures once armed
	stop    context.CancelFunc
	done    chan struct{}
}

func probe(ctx context.Context, rdb redis.UniversalClient, keys ...string) *prober {
	ctx, cancel := context.WithCancel(ctx)
	p := &prober{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			// armed is read before the write: a write that began before
			// the arming (and the kill) is not counted, however late its
			// iteration ends (it once made the first success after a
			// failover look 4.7 s older than the promotion)
			armed := p.armed.Load()
			op, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			err := rdb.Set(op, keys[0], "v", 0).Err()
			for _, k := range keys[1:] { // the other masters' keys: read and write
				_ = rdb.Set(op, k, "v", 0).Err()
				_ = rdb.Get(op, k).Err()
			}
			cancel()
			if armed {
				if err == nil {
					p.firstOK.CompareAndSwap(0, time.Now().UnixNano())
				} else {
					p.fails.Add(1)
				}
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *prober) close() {
	p.stop()
	<-p.done
}

// waitOK waits up to timeout for p's first success and returns it (zero
// if none came).
func (p *prober) waitOK(timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ns := p.firstOK.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}
}

// keyOf is a key whose slot master m serves in c.
func keyOf(t *testing.T, c *testenv.RedisCluster, m *testenv.Redis, prefix string) string {
	t.Helper()
	for i := range 100000 {
		k := prefix + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		for _, r := range c.SlotRanges(m) {
			if s := testenv.KeySlot(k); s >= r[0] && s <= r[1] {
				return k
			}
		}
	}
	t.Fatalf("no key of %s", m.Addr)
	return ""
}

// TestRedisClusterFailoverFollowed: a master of a Redis Cluster with
// replicas dies (SIGKILL); the client of RedisClientHA writes to its slots
// again within a few hundred ms of the replica's promotion (the bound
// asserted is 5 s, for a loaded CI box), logs the failover once and counts
// it once. A client built as RedisClient was before (go-redis' defaults)
// is shown beside it: it keeps dialing the dead master until its slot map
// is a minute old.
func TestRedisClusterFailoverFollowed(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisClusterReplicas(t, 3)
	cfg := config.Common{RedisAddrs: c.Addrs, RedisCluster: true}
	rdb, reg, logs := haClient(t, cfg)
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("RedisClientHA with a cluster: %T", rdb)
	}
	old := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: c.Addrs, IsClusterMode: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxRetries: 2, DialerRetries: 1,
		ContextTimeoutEnabled: true, DisableIdentity: true})
	defer old.Close()

	masters := c.Masters()
	victim := masters[1]
	keys := []string{keyOf(t, c, victim, "v")}
	for _, m := range masters {
		if m != victim {
			keys = append(keys, keyOf(t, c, m, "o"))
		}
	}
	ctx := t.Context()
	for _, cl := range []redis.UniversalClient{rdb, old} {
		for _, k := range keys {
			if err := cl.Set(ctx, k, "v", 0).Err(); err != nil {
				t.Fatalf("SET %s before the failover: %v", k, err)
			}
		}
	}
	if got := counter(t, reg, "delayq_redis_slot_map_reloads_total"); got < 1 {
		t.Fatalf("slot map reloads %v, want at least the first", got)
	}
	pNew, pOld := probe(ctx, rdb, keys...), probe(ctx, old, keys[0])
	defer pNew.close()
	defer pOld.close()

	c.KillMaster(t, victim) // returns once the process is gone
	pNew.armed.Store(true)
	pOld.armed.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nw, took, err := c.WaitPromoted(wctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	ok := pNew.waitOK(10 * time.Second)
	if ok.IsZero() {
		t.Fatalf("the client did not write to the promoted %s within 10s of its promotion; log:\n%s", nw.Addr, logs)
	}
	lag := ok.Sub(promoted)
	t.Logf("promotion %v after the kill; RedisClientHA's first write to the new master %v after it (%d failures meanwhile)",
		took.Round(time.Millisecond), lag.Round(time.Millisecond), pNew.fails.Load())
	if lag > 5*time.Second {
		t.Errorf("the client followed the failover %v after the promotion, want within 5s (about 0.2s on an idle box)", lag)
	}
	oldOK := pOld.waitOK(max(0, 6*time.Second-time.Since(promoted)))
	if oldOK.IsZero() {
		t.Logf("go-redis' defaults (reload on MOVED or every 60s): still failing %v after the promotion", time.Since(promoted).Round(time.Second))
	} else {
		t.Logf("go-redis' defaults: first write %v after the promotion", oldOK.Sub(promoted).Round(time.Millisecond))
	}

	if n := logs.count("redis failover followed"); n != 1 {
		t.Errorf("%d log lines of the failover, want 1:\n%s", n, logs)
	}
	want := "old=" + victim.Addr + " new=" + nw.Addr
	if !strings.Contains(logs.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, logs)
	}
	if got := counter(t, reg, "delayq_redis_failovers_total"); got != 1 {
		t.Errorf("delayq_redis_failovers_total = %v, want 1", got)
	}
}

// TestRedisSentinelFailoverFollowed: with DQ_REDIS_SENTINEL_ADDRS the
// client is go-redis' Sentinel client (a *redis.Client: one server for
// the store), finds the primary through the sentinels (their own password),
// and writes to the replica Sentinel promotes when the primary dies.
func TestRedisSentinelFailoverFollowed(t *testing.T) {
	t.Parallel()
	s := testenv.StartSentinel(t, 1, testenv.RedisOptions{Password: "pw"})
	cfg := config.Common{RedisAddrs: []string{"127.0.0.1:1"}, RedisPassword: "pw",
		RedisSentinelAddrs: s.SentinelAddrs, RedisSentinelMaster: s.MasterName, RedisSentinelPassword: "pw"}
	rdb, reg, logs := haClient(t, cfg)
	if _, ok := rdb.(*redis.Client); !ok {
		t.Fatalf("RedisClientHA with Sentinel: %T, want a *redis.Client", rdb)
	}
	ctx := t.Context()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p := probe(ctx, rdb, "k")
	defer p.close()
	old := s.Primary()
	s.KillPrimary(t)
	p.armed.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nw, took, err := s.WaitSwitched(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	ok := p.waitOK(10 * time.Second)
	if ok.IsZero() {
		t.Fatalf("no write to the new primary %s within 10s of the switch; log:\n%s", nw.Addr, logs)
	}
	t.Logf("switch %v after the kill; first write %v after it", took.Round(time.Millisecond), ok.Sub(switched).Round(time.Millisecond))
	if lag := ok.Sub(switched); lag > 5*time.Second {
		t.Errorf("the client followed the switch %v after it, want within 5s", lag)
	}
	if v, err := nw.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k on the new primary: %q %v", v, err)
	}
	p.close()
	if got := counter(t, reg, "delayq_redis_failovers_total"); got != 1 {
		t.Errorf("delayq_redis_failovers_total = %v, want 1; log:\n%s", got, logs)
	}
	if !strings.Contains(logs.String(), "old="+old.Addr+" new="+nw.Addr) {
		t.Errorf("the log does not name the old and new primary:\n%s", logs)
	}
}

// TestRedisDemotedInPlace: the primary is demoted in place (SENTINEL
// FAILOVER, then REPLICAOF on the old primary). The Sentinel client
// writes to the new primary after the switch with at most a transient
// error; a one-address client of the old primary gets READONLY, counted
// and logged once however often it retries.
func TestRedisDemotedInPlace(t *testing.T) {
	t.Parallel()
	s := testenv.StartSentinel(t, 1)
	old := s.Primary()
	sent, sreg, slogs := haClient(t, config.Common{RedisAddrs: []string{"127.0.0.1:1"},
		RedisSentinelAddrs: s.SentinelAddrs, RedisSentinelMaster: s.MasterName})
	one, oreg, ologs := haClient(t, config.Common{RedisAddrs: []string{old.Addr}})
	ctx := t.Context()
	for _, cl := range []redis.UniversalClient{sent, one} {
		if err := cl.Set(ctx, "k", "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	nw := s.DemoteInPlace(t)

	var errs []error
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := sent.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		errs = append(errs, err)
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel client cannot write 5s after the switch: %v", errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(errs) > 1 {
		t.Errorf("the Sentinel client failed %d times after the switch, want at most once: %v", len(errs), errs)
	}
	if v, err := nw.Client(t).Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Fatalf("GET k on the new primary %s: %q %v, want the write after the switch", nw.Addr, v, err)
	}
	if got := counter(t, sreg, "delayq_redis_failovers_total"); got != 1 {
		t.Errorf("Sentinel client: delayq_redis_failovers_total = %v, want 1; log:\n%s", got, slogs)
	}

	for range 5 {
		if err := one.Set(ctx, "k", "x", 0).Err(); !redis.IsReadOnlyError(err) {
			t.Fatalf("SET on the demoted primary through a one-address client: %v, want READONLY", err)
		}
	}
	if got := counter(t, oreg, "delayq_redis_failovers_total"); got != 1 {
		t.Errorf("one-address client: delayq_redis_failovers_total = %v, want 1", got)
	}
	if n := ologs.count("READONLY"); n != 1 {
		t.Errorf("one-address client: %d log lines of READONLY, want 1:\n%s", n, ologs)
	}
}

// TestRedisHASettings: the Sentinel and acknowledgement settings, their
// defaults, and the errors that name them.
func TestRedisHASettings(t *testing.T) {
	var c config.Common
	b := config.NewBinder("test")
	c.BindCommon(b, ":1")
	env := map[string]string{
		"DQ_REDIS_SENTINEL_ADDRS": "s1:26379, s2:26379", "DQ_REDIS_SENTINEL_MASTER": "mymaster",
		"DQ_REDIS_SENTINEL_USERNAME": "u", "DQ_REDIS_SENTINEL_PASSWORD": "hunter2",
		"DQ_REDIS_REPLICA_ACKS": "1", "DQ_REDIS_WAIT_AOF": "true",
	}
	if err := b.Parse(nil, func(k string) string { return env[k] }, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.RedisSentinelAddrs, " ") != "s1:26379 s2:26379" || c.RedisSentinelMaster != "mymaster" ||
		c.RedisSentinelUsername != "u" || c.RedisSentinelPassword != "hunter2" ||
		c.RedisReplicaAcks != 1 || !c.RedisWaitAOF || c.RedisAckTimeout != 500*time.Millisecond {
		t.Fatalf("parsed %+v", c)
	}
	c.Namespace, c.Shards, c.Retention, c.LogLevel, c.LogFormat = "dq", 1, time.Hour, "info", "json"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(b.LogAttrs()); strings.Contains(s, "hunter2") {
		t.Fatalf("the sentinel password is logged: %s", s)
	}
	var usage strings.Builder
	b.Usage(&usage)
	for _, v := range []string{"DQ_REDIS_SENTINEL_ADDRS", "DQ_REDIS_SENTINEL_MASTER", "DQ_REDIS_SENTINEL_USERNAME",
		"DQ_REDIS_SENTINEL_PASSWORD_FILE", "DQ_REDIS_SENTINEL_TLS_CA", "DQ_REDIS_REPLICA_ACKS", "DQ_REDIS_ACK_TIMEOUT", "DQ_REDIS_WAIT_AOF"} {
		if !strings.Contains(usage.String(), v) {
			t.Errorf("-h does not mention %s", v)
		}
	}

	// a sentinel configuration with every other setting at its default
	base := func() config.Common {
		var c config.Common
		bindNames(&c)
		c.RedisAddrs, c.RedisSentinelAddrs, c.RedisSentinelMaster = []string{"x:1"}, []string{"s:26379"}, "m"
		return c
	}
	for _, tc := range []struct {
		name string
		set  func(c *config.Common)
		want string // "" = valid
	}{
		{"sentinel", func(*config.Common) {}, ""},
		{"addrs without master", func(c *config.Common) { c.RedisSentinelMaster = "" }, "DQ_REDIS_SENTINEL_ADDRS: set with DQ_REDIS_SENTINEL_MASTER"},
		{"master without addrs", func(c *config.Common) { c.RedisSentinelAddrs = nil }, "DQ_REDIS_SENTINEL_MASTER: set with DQ_REDIS_SENTINEL_ADDRS"},
		{"password without addrs", func(c *config.Common) {
			c.RedisSentinelAddrs, c.RedisSentinelMaster, c.RedisSentinelPassword = nil, "", "p"
		},
			"set with DQ_REDIS_SENTINEL_ADDRS"},
		{"with cluster", func(c *config.Common) { c.RedisCluster = true }, "DQ_REDIS_SENTINEL_ADDRS with DQ_REDIS_CLUSTER"},
		{"with several addrs", func(c *config.Common) { c.RedisAddrs = []string{"a:1", "b:1"} }, "DQ_REDIS_SENTINEL_ADDRS with several DQ_REDIS_ADDRS"},
		{"user without password", func(c *config.Common) { c.RedisSentinelUsername = "u" }, "DQ_REDIS_SENTINEL_USERNAME: set with DQ_REDIS_SENTINEL_PASSWORD"},
		{"sentinel CA missing", func(c *config.Common) { c.RedisSentinelTLS.CA = "/nonexistent/ca.pem" }, "DQ_REDIS_SENTINEL_TLS_CA: open /nonexistent/ca.pem"},
		{"acks", func(c *config.Common) { c.RedisReplicaAcks = 2 }, ""},
		{"too many acks", func(c *config.Common) { c.RedisReplicaAcks = 17 }, "DQ_REDIS_REPLICA_ACKS 17: between 0 and 16"},
		{"negative acks", func(c *config.Common) { c.RedisReplicaAcks = -1 }, "DQ_REDIS_REPLICA_ACKS -1"},
		{"ack timeout at the read timeout", func(c *config.Common) { c.RedisAckTimeout = 3 * time.Second }, "DQ_REDIS_ACK_TIMEOUT 3s: above 0 and below the 3s Redis read timeout"},
		{"ack timeout zero with acks", func(c *config.Common) { c.RedisReplicaAcks, c.RedisAckTimeout = 1, 0 }, "DQ_REDIS_ACK_TIMEOUT 0s"},
		{"ack timeout zero with WAITAOF", func(c *config.Common) { c.RedisWaitAOF, c.RedisAckTimeout = true, 0 }, "DQ_REDIS_ACK_TIMEOUT 0s"},
		{"ack timeout zero, nothing waits", func(c *config.Common) { c.RedisAckTimeout = 0 }, ""},
		{"ack timeout negative", func(c *config.Common) { c.RedisAckTimeout = -time.Second }, "DQ_REDIS_ACK_TIMEOUT -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.set(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v; want %q", err, tc.want)
			}
			if tc.want != "" && strings.HasPrefix(tc.want, "DQ_REDIS_SENTINEL") {
				if _, err := c.RedisClient(); err == nil {
					t.Fatalf("RedisClient accepted what Validate refuses")
				}
			}
		})
	}
}

// TestRedisSentinelTLS: sentinels and nodes on TLS only with client
// certificates and ACL users on the nodes; the sentinels are dialled with
// DQ_REDIS_TLS_* when DQ_REDIS_SENTINEL_TLS_* are unset, and with their
// own when set.
func TestRedisSentinelTLS(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	s := testenv.StartSentinel(t, 1, testenv.RedisOptions{TLS: pki,
		Users: []testenv.RedisUser{{Name: "dq", Password: "pw", Rules: []string{"~*", "+@all"}}}})
	files := config.TLSFiles{CA: pki.Client.CA, Cert: pki.Client.Cert, Key: pki.Client.Key}
	for _, tc := range []struct {
		name     string
		sentinel config.TLSFiles
	}{
		{"the Redis TLS settings", config.TLSFiles{}},
		{"their own TLS settings", files},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Common{RedisAddrs: []string{"127.0.0.1:1"}, RedisUsername: "dq", RedisPassword: "pw", RedisTLS: files,
				RedisSentinelAddrs: s.SentinelAddrs, RedisSentinelMaster: s.MasterName, RedisSentinelTLS: tc.sentinel}
			rdb, err := c.RedisClient()
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			if err := rdb.Set(t.Context(), "k", tc.name, 0).Err(); err != nil {
				t.Fatalf("SET through the sentinels over TLS: %v", err)
			}
		})
	}
	// sentinels dialled without a client certificate refuse, and the
	// error names a sentinel
	c := config.Common{RedisAddrs: []string{"127.0.0.1:1"}, RedisUsername: "dq", RedisPassword: "pw", RedisTLS: files,
		RedisSentinelAddrs: s.SentinelAddrs[:1], RedisSentinelMaster: s.MasterName, RedisSentinelTLS: config.TLSFiles{CA: pki.Client.CA}}
	rdb, err := c.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	err = rdb.Set(t.Context(), "k", "x", 0).Err()
	if err == nil || !strings.Contains(err.Error(), "redis sentinel at "+s.SentinelAddrs[0]) {
		t.Fatalf("SET with sentinels refusing the TLS handshake: %v, want an error naming the sentinel", err)
	}
}
