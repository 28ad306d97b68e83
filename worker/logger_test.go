package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// A worker without a Logger logs to slog.Default(): the warning that a
// consumed topic is missing reaches it (issue 43: it never showed).
func TestDefaultLoggerIsSlogDefault(t *testing.T) {
	logs := &lockedBuffer{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	e := newEnv(t)
	k := worktest.StrictKafka(t, "dq.dead")
	cfg, _ := e.config(t, "w1")
	cfg.Brokers, cfg.Topics, cfg.Logger = k.Brokers, []string{"later.tasks"}, nil
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "the missing topic's warning in slog.Default()", func() bool {
		for line := range strings.Lines(logs.String()) {
			var rec struct{ Level, Msg string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" && strings.HasPrefix(rec.Msg, "kafka topics missing") {
				return true
			}
		}
		return false
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
