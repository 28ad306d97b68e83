package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/testenv"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial through a process-wide logger; the
	// tests kill Redis on purpose.
	redis.SetLogger(discardRedisLog{})
	goleak.VerifyTestMain(statusCoverage{m}) // statusCoverage: openapi_test.go
}

var nsSeq atomic.Int64

// uniqueNS is a namespace no other test uses.
func uniqueNS(t testing.TB) string {
	r := strings.NewReplacer("/", "-", " ", "_", ":", "_", "{", "_", "}", "_")
	return fmt.Sprintf("d%d-%s", nsSeq.Add(1), r.Replace(t.Name()))
}

// testConfig is a daemon configuration for a test: its own namespace and
// journal directory, a free loopback port.
func testConfig(t testing.TB, redisAddr string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Namespace = uniqueNS(t)
	cfg.RedisAddrs = []string{redisAddr}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.JournalDir = t.TempDir()
	cfg.ShutdownGrace = 5 * time.Second
	cfg.RedisTimeout = time.Second
	cfg.EtcdEndpoints = nil // the limits API is tested with its own etcd (limits_test.go)
	return cfg
}

// testApp is a daemon running in-process.
type testApp struct {
	*App
	t      testing.TB
	base   string
	token  string
	cancel context.CancelFunc
	done   chan error
}

// startApp starts a daemon with cfg; it stops at cleanup (or with stop).
func startApp(t testing.TB, cfg Config) *testApp {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app, err := New(t.Context(), cfg, log)
	if err != nil {
		t.Fatalf("new daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	ta := &testApp{App: app, t: t, base: "http://" + app.Addr(), token: cfg.APIToken, cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- app.Run(ctx) }()
	t.Cleanup(func() { ta.stop() })
	return ta
}

// stop shuts the daemon down and waits for Run to return.
func (a *testApp) stop() {
	a.t.Helper()
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Errorf("daemon run: %v", err)
		}
	case <-time.After(20 * time.Second):
		a.t.Fatalf("daemon did not stop within 20s")
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// reply is a decoded answer.
type reply struct {
	Status int
	Raw    []byte
	JSON   map[string]any
}

func (r reply) str(key string) string {
	v, _ := r.JSON[key].(string)
	return v
}

// errCode is the "error.code" of an error answer.
func (r reply) errCode() string {
	e, _ := r.JSON["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r reply) errMessage() string {
	e, _ := r.JSON["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// do sends a request with a JSON body (when body != "") and the app's
// token; every request but a GET or HEAD says Content-Type
// application/json, as the daemon requires of writes, body or not.
func (a *testApp) do(method, path, body string) reply {
	a.t.Helper()
	h := http.Header{}
	if body != "" || (method != http.MethodGet && method != http.MethodHead) {
		h.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		h.Set("Authorization", "Bearer "+a.token)
	}
	return a.doHeader(method, path, body, h)
}

func (a *testApp) doHeader(method, path, body string, h http.Header) reply {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header = h
	resp, err := httpClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	r := reply{Status: resp.StatusCode, Raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.JSON); err != nil {
			a.t.Fatalf("%s %s: answer is not JSON: %v: %s", method, path, err, raw)
		}
	}
	return r
}

// readyz is GET /readyz: its status and body.
func (a *testApp) readyz() (int, admin.ReadyBody) {
	a.t.Helper()
	g := a.do("GET", "/readyz", "")
	var b admin.ReadyBody
	if err := json.Unmarshal(g.Raw, &b); err != nil {
		a.t.Fatalf("readyz body: %v: %s", err, g.Raw)
	}
	return g.Status, b
}

// stats is GET /v1/stats, decoded strictly into the client's wire type
// (api.Stats), which must write it back byte for byte.
func (a *testApp) stats() api.Stats {
	a.t.Helper()
	r := a.do("GET", "/v1/stats", "")
	if r.Status != 200 {
		a.t.Fatalf("stats: %d %s", r.Status, r.Raw)
	}
	var s api.Stats
	strictRoundTrip(a.t, r.Raw, &s)
	return s
}

// openStore opens the namespace's store with its own client, as a shard
// leader or worker would.
func openStore(t testing.TB, rdb redis.UniversalClient, cfg Config) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(t.Context(), rdb, redisstore.Options{Namespace: cfg.Namespace, Shards: cfg.Shards, Retention: cfg.Retention})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return st
}

// keyCount counts the namespace's keys.
func keyCount(t testing.TB, rdb *redis.Client, ns string) int {
	t.Helper()
	var n int
	iter := rdb.Scan(t.Context(), 0, "dq:{"+ns+"*", 1000).Iterator()
	for iter.Next(t.Context()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// startRedis starts a redis-server with AOF (every acknowledged write
// survives Kill + Restart).
func startRedis(t testing.TB) *testenv.Redis {
	return testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
}

// startRedisEtcd starts a redis-server (startRedis) and an etcd, and
// returns them with a test config that names both.
func startRedisEtcd(t testing.TB) (*testenv.Redis, *testenv.Etcd, Config) {
	t.Helper()
	r, e := startRedis(t), testenv.StartEtcd(t)
	cfg := testConfig(t, r.Addr)
	cfg.EtcdEndpoints = e.Endpoints
	return r, e, cfg
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// quietReply is a reply or the transport error (for goroutines, which
// must not call Fatal).
type quietReply struct {
	reply
	err error
}

func (a *testApp) doQuiet(method, path, body string) quietReply {
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		return quietReply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return quietReply{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return quietReply{reply: reply{Status: resp.StatusCode, Raw: raw}, err: err}
}

// grepLines keeps the lines of s that start with one of the prefixes.
func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

// journal appends subs[idx...] to the journal as unwritten entries (as
// for an unreachable Redis) and wakes the compensator.
func (a *App) journal(ctx context.Context, subs []redisstore.Submit, idx []int, out []wire.Scheduled) {
	why := make([]uint8, len(subs))
	for i := range why {
		why[i] = whyUnavailable
	}
	a.core.appendJournal(ctx, subs, idx, why, out, true)
}
