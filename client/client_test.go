package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startDaemon runs a real daemon (real Redis) and serves its handler with
// httptest. It returns the server URL and a store on the same namespace.
func startDaemon(t *testing.T, token string) (string, *redisstore.Store) {
	t.Helper()
	return startDaemonWith(t, token, nil)
}

// startDaemonWith is startDaemon with the config adjusted by adjust.
func startDaemonWith(t *testing.T, token string, adjust func(*daemon.Config)) (string, *redisstore.Store) {
	t.Helper()
	r := testenv.StartRedis(t)
	cfg := daemon.DefaultConfig()
	cfg.Namespace = "client-" + t.Name()
	cfg.RedisAddrs = []string{r.Addr}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.JournalDir = t.TempDir()
	cfg.APIToken = token
	cfg.ShutdownGrace = 5 * time.Second
	if adjust != nil {
		adjust(&cfg)
	}
	app, err := daemon.New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	st, err := redisstore.New(t.Context(), r.Client(t), redisstore.Options{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, st
}

func TestClient(t *testing.T) {
	url, st := startDaemon(t, "tok")
	ctx := t.Context()
	c := client.New(url, client.WithToken("tok"))

	due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	res, err := c.Schedule(ctx, client.Task{ID: "c1", Type: "order.cancel", Payload: json.RawMessage(`{"order":  42, "s":"<&>"}`),
		DueAt: due, Headers: map[string]string{"trace": "t"}, MaxAttempts: 3, Timeout: 2 * time.Second, Priority: 4, Topic: "orders", Key: "k"})
	if err != nil || res.Outcome != "created" || res.State != "scheduled" || !res.DueAt.Equal(due) || res.Shard != st.Shard("c1") || res.Journaled() {
		t.Fatalf("schedule: %+v %v", res, err)
	}
	res, err = c.Schedule(ctx, client.Task{ID: "c1", Type: "order.cancel", Payload: json.RawMessage(`{"order":  42, "s":"<&>"}`),
		DueAt: due, Headers: map[string]string{"trace": "t"}, MaxAttempts: 3, Timeout: 2 * time.Second, Priority: 4, Topic: "orders", Key: "k"})
	if err != nil || res.Outcome != "unchanged" {
		t.Fatalf("re-submit: %+v %v", res, err)
	}
	got, err := c.Get(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != `{"order":  42, "s":"<&>"}` || got.Type != "order.cancel" || got.State != "scheduled" || !got.DueAt.Equal(due) ||
		got.Headers["trace"] != "t" || got.MaxAttempts != 3 || time.Duration(got.Timeout) != 2*time.Second || got.Priority != 4 ||
		got.Topic != "orders" || got.Key != "k" || got.Attempt != 1 {
		t.Fatalf("get: %+v", got)
	}

	bin, err := c.Schedule(ctx, client.Task{Type: "blob", PayloadBytes: []byte{0, 1, 255}, Delay: time.Hour})
	if err != nil || bin.ID == "" {
		t.Fatalf("binary: %+v %v", bin, err)
	}
	if g, err := c.Get(ctx, bin.ID); err != nil || string(g.PayloadBytes) != "\x00\x01\xff" || g.Payload != nil {
		t.Fatalf("get binary: %+v %v", g, err)
	}

	// Ids may hold any printable character, '/', '?', '#' and '%' included.
	odd := "dir/sub?q=1#frag%2F..é"
	if res, err := c.Schedule(ctx, client.Task{ID: odd, Type: "x", Delay: time.Hour}); err != nil || res.ID != odd {
		t.Fatalf("odd id: %+v %v", res, err)
	}
	if g, err := c.Get(ctx, odd); err != nil || g.ID != odd {
		t.Fatalf("get odd id: %+v %v", g, err)
	}
	if err := c.Cancel(ctx, odd); err != nil {
		t.Fatalf("cancel odd id: %v", err)
	}

	if _, err := c.Get(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	var apiErr *client.APIError
	if _, err := c.Schedule(ctx, client.Task{ID: "bad"}); !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Code != "invalid_task" {
		t.Fatalf("invalid task: %v", err)
	}
	if _, err := c.Schedule(ctx, client.Task{Type: "x", Payload: json.RawMessage(`{nope`)}); err == nil {
		t.Fatal("invalid JSON payload accepted by the client")
	}

	at, err := c.Reschedule(ctx, "c1", due.Add(time.Minute))
	if err != nil || !at.Equal(due.Add(time.Minute)) {
		t.Fatalf("reschedule: %v %v", at, err)
	}
	at, err = c.RescheduleIn(ctx, "c1", 2*time.Hour)
	if err != nil || at.Before(time.Now().Add(119*time.Minute)) {
		t.Fatalf("reschedule in: %v %v", at, err)
	}
	if _, err := c.Reschedule(ctx, "nope", due); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("reschedule unknown: %v", err)
	}
	if err := c.Cancel(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "c1"); !errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrNotFound) {
		t.Fatalf("cancel twice: %v", err)
	}

	batch, err := c.ScheduleBatch(ctx, []client.Task{
		{ID: "b1", Type: "x", Delay: time.Hour},
		{ID: "b2"}, // no type
		{ID: "c1", Type: "other"},
		{ID: "b3", Type: "x", DueAt: due},
	})
	if err != nil || len(batch) != 4 {
		t.Fatalf("batch: %+v %v", batch, err)
	}
	if batch[0].Err != nil || batch[0].Outcome != "created" || batch[3].Err != nil || !batch[3].DueAt.Equal(due) {
		t.Fatalf("batch good items: %+v", batch)
	}
	if !errors.As(batch[1].Err, &apiErr) || apiErr.Code != "invalid_task" {
		t.Fatalf("batch bad item: %+v", batch[1])
	}
	if !errors.Is(batch[2].Err, client.ErrConflict) {
		t.Fatalf("batch conflicting item: %+v", batch[2])
	}
	if empty, err := c.ScheduleBatch(ctx, nil); err != nil || len(empty) != 0 {
		t.Fatalf("empty batch: %v %v", empty, err)
	}

	stats, err := c.Stats(ctx)
	if err != nil || !stats.RedisUp || stats.JournalDepth != 0 || len(stats.Shards) != 16 || stats.Totals.Scheduled != 3 {
		t.Fatalf("stats: %+v %v", stats, err)
	}

	// A dead task, made as a worker would.
	if _, err := c.Schedule(ctx, client.Task{ID: "d1", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	var gen uint64
	taken := false
	testenv.WaitFor(t, 5*time.Second, "d1 taken", func() bool {
		tk, err := st.Take(ctx, st.Shard("d1"), 1, 100, time.Minute)
		for _, x := range tk.Tasks {
			if x.ID == "d1" {
				gen, taken = x.Gen, true
			}
		}
		return err == nil && taken
	})
	if _, err := st.Finish(ctx, redisstore.Finish{ID: "d1", Gen: gen, Kind: redisstore.Dead, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	dead, err := c.ListDead(ctx, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != "d1" || dead[0].LastError != "boom" || dead[0].DiedAt.IsZero() || dead[0].State != "dead" {
		t.Fatalf("list dead: %+v %v", dead, err)
	}
	if _, err := c.Redrive(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Redrive(ctx, "d1"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("redrive twice: %v", err)
	}
	if err := c.DeleteDead(ctx, "d1"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete a redriven task: %v", err)
	}
	if err := c.DeleteDead(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete unknown dead: %v", err)
	}

	// Without the token.
	if _, err := client.New(url).Stats(ctx); !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Code != "unauthorized" {
		t.Fatalf("no token: %v", err)
	}
}
