package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/testenv"
)

func TestMain(m *testing.M) {
	// go-redis logs failed dials through a process-wide logger.
	redis.SetLogger(discardRedisLog{})
	goleak.VerifyTestMain(m,
		// The embedded etcd server (dq dev) starts process-wide loggers
		// and gRPC balancer goroutines that outlive a closed server.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		// the webhooks' fast client: its cleaners end some time after its
		// idle connections were closed
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	)
}

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

var nsSeq atomic.Int64

// startDaemon runs a daemon in-process against a fresh redis-server and
// returns its base URL. etcd, when not empty, enables the limits API.
func startDaemon(t *testing.T, etcd []string) (string, *testenv.Redis) {
	t.Helper()
	base, r, _ := startDaemonNS(t, etcd)
	return base, r
}

// startDaemonNS is startDaemon that also returns the daemon's namespace.
func startDaemonNS(t *testing.T, etcd []string) (string, *testenv.Redis, string) {
	t.Helper()
	r := testenv.StartRedis(t)
	cfg := daemon.DefaultConfig()
	cfg.Namespace = fmt.Sprintf("cli%d", nsSeq.Add(1))
	cfg.RedisAddrs = []string{r.Addr}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.JournalDir = t.TempDir()
	cfg.ShutdownGrace = 5 * time.Second
	cfg.EtcdEndpoints = etcd
	cfg.MaxBatch = 1000
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app, err := daemon.New(t.Context(), cfg, log)
	if err != nil {
		t.Fatalf("daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return "http://" + app.Addr(), r, cfg.Namespace
}

// runDQ runs dq with args and returns stdout, stderr and the error.
func runDQ(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb syncBuffer
	e := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	err := Run(t.Context(), args, e)
	return out.String(), errb.String(), err
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
