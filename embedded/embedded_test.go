package embedded_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/embedded"
	"github.com/delayq/delayq/internal/testenv"
)

var nsSeq int

// open starts a producer on r in a namespace of its own, configured only
// by args (no DQ_* variable of the test's environment leaks in).
func open(t testing.TB, r *testenv.Redis, dir string, args ...string) *embedded.Producer {
	t.Helper()
	nsSeq++
	args = append([]string{"-redis-addrs=" + r.Addr, fmt.Sprintf("-namespace=emb%d", nsSeq), "-shards=4",
		"-journal-dir=" + dir, "-etcd-endpoints=", "-redis-timeout=500ms"}, args...)
	p, err := embedded.Open(t.Context(), embedded.Options{Args: args, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func task(id string) client.Task {
	return client.Task{ID: id, Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`), Delay: time.Hour}
}

func TestScheduleStoresAndAnswersAsTheAPI(t *testing.T) {
	r := testenv.StartRedis(t)
	p := open(t, r, t.TempDir())
	ctx := t.Context()

	res, err := p.Schedule(ctx, task("order-1"))
	if err != nil || res.Outcome != "created" || res.State != "scheduled" || res.ID != "order-1" {
		t.Fatalf("first schedule: %+v, %v", res, err)
	}
	info, err := p.Client().Get(ctx, "order-1")
	if err != nil || info.State != "scheduled" || !info.DueAt.Equal(res.DueAt) {
		t.Fatalf("get after schedule: %+v, %v (schedule said due %v)", info, err, res.DueAt)
	}

	// The same calls through the HTTP API's JSON (Client, served by the
	// same daemon) answer the same: the direct path maps the daemon's
	// answer exactly as the client decodes it.
	for _, c := range []struct {
		name string
		t    client.Task
	}{
		{"created", task("order-2")},
		{"unchanged", task("order-1")},
		{"updated", client.Task{ID: "order-1", Type: "email", Payload: json.RawMessage(`{"to":"b@example.com"}`), DueAt: time.Now().Add(2 * time.Hour)}},
		{"bad type", client.Task{ID: "order-3", Type: ""}},
		{"bad id", client.Task{ID: "..", Type: "email"}},
	} {
		direct, derr := p.Schedule(ctx, c.t)
		if c.t.ID == "order-2" {
			c.t.ID = "order-2b" // a new id for the API call, to get "created" again
		}
		if c.name == "unchanged" || c.name == "updated" {
			c.t.ID = "order-1" // the API call finds what the direct one left
		}
		api, aerr := p.Client().Schedule(ctx, c.t)
		if c.name == "updated" {
			if derr != nil || direct.Outcome != "updated" || aerr != nil || api.Outcome != "unchanged" {
				t.Fatalf("%s: direct %+v, %v; api %+v, %v", c.name, direct, derr, api, aerr)
			}
			if !direct.DueAt.Equal(api.DueAt) {
				t.Fatalf("%s: due %v direct, %v through the API", c.name, direct.DueAt, api.DueAt)
			}
			continue
		}
		if (derr == nil) != (aerr == nil) {
			t.Fatalf("%s: direct %v, API %v", c.name, derr, aerr)
		}
		if derr != nil {
			var de, ae *client.APIError
			if !errors.As(derr, &de) || !errors.As(aerr, &ae) || *de != *ae {
				t.Fatalf("%s: direct error %#v, API error %#v", c.name, derr, aerr)
			}
			if de.Status != http.StatusUnprocessableEntity {
				t.Fatalf("%s: status %d, want 422: %v", c.name, de.Status, de)
			}
			continue
		}
		if direct.Outcome != c.name || api.Outcome != c.name || direct.State != api.State || direct.Shard < 0 {
			t.Fatalf("%s: direct %+v, API %+v", c.name, direct, api)
		}
		// a relative due time re-submitted: the earlier one stands (Kept), on both paths
		if c.name == "unchanged" && (!direct.DueAt.Equal(api.DueAt) || direct.Shard != api.Shard || direct.ID != api.ID ||
			!direct.KeptDueAt() || direct.Kept != api.Kept) {
			t.Fatalf("%s: direct %+v, API %+v", c.name, direct, api)
		}
	}
	// a refused task names the field and stores nothing
	_, err = p.Schedule(ctx, client.Task{ID: "order-4", Type: "email", Delay: -time.Hour, DueAt: time.Now()})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status/100 != 4 || !strings.Contains(ae.Message, "due_at") {
		t.Fatalf("due_at and delay both set: %v", err)
	}
	if _, err := p.Client().Get(ctx, "order-4"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("refused task stored: %v", err)
	}
	// the rest of the API, in process
	if err := p.Client().Cancel(ctx, "order-2"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if info, err := p.Client().Get(ctx, "order-2"); err != nil || info.State != "cancelled" {
		t.Fatalf("get after cancel: %+v, %v", info, err)
	}
}

func TestScheduleBatch(t *testing.T) {
	r := testenv.StartRedis(t)
	p := open(t, r, t.TempDir(), "-max-batch=3")
	ctx := t.Context()

	out, err := p.ScheduleBatch(ctx, []client.Task{task("b-1"), {ID: "b-2", Type: "has space"}, task("b-3")})
	if err != nil || len(out) != 3 {
		t.Fatalf("batch: %v, %v", out, err)
	}
	var ae *client.APIError
	if out[0].Err != nil || out[0].Outcome != "created" || out[2].Err != nil || out[2].ID != "b-3" ||
		!errors.As(out[1].Err, &ae) || ae.Status != http.StatusUnprocessableEntity || !strings.Contains(ae.Message, "type") {
		t.Fatalf("batch results: %+v", out)
	}
	if _, err := p.Client().Get(ctx, "b-2"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("refused item stored: %v", err)
	}
	// over DQ_MAX_BATCH: refused as a whole, as the API refuses it
	_, err = p.ScheduleBatch(ctx, []client.Task{task("c-1"), task("c-2"), task("c-3"), task("c-4")})
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge || ae.Code != "batch_too_large" {
		t.Fatalf("batch of 4 over max 3: %v", err)
	}
	if _, err := p.Client().Get(ctx, "c-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("task of a refused batch stored: %v", err)
	}
}

// Concurrent single schedules share Redis calls and each gets its own
// answer.
func TestConcurrentSchedules(t *testing.T) {
	r := testenv.StartRedis(t)
	p := open(t, r, t.TempDir())
	const callers, each = 16, 100
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("c%d-%d", g, i)
				res, err := p.Schedule(t.Context(), task(id))
				if err == nil && (res.ID != id || res.Outcome != "created") {
					err = fmt.Errorf("%s answered %+v", id, res)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := p.Client().Stats(t.Context())
	if err != nil || st.Totals.Scheduled != callers*each {
		t.Fatalf("stats: %+v, %v; want %d scheduled", st, err, callers*each)
	}
}

// While Redis is down a schedule is journaled (durable in the journal
// directory) and reaches Redis once it is back; Close keeps what is still
// journaled for the next Open of the directory.
func TestJournalWhileRedisIsDown(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
	dir := t.TempDir()
	p := open(t, r, dir)
	ctx := t.Context()
	if _, err := p.Schedule(ctx, task("before")); err != nil {
		t.Fatal(err)
	}
	r.Stop(t)
	res, err := p.Schedule(ctx, task("during"))
	if err != nil || !res.Journaled() || res.Outcome != "journaled" {
		t.Fatalf("schedule with Redis down: %+v, %v", res, err)
	}
	if p.JournalDepth() != 1 {
		t.Fatalf("journal depth %d, want 1", p.JournalDepth())
	}
	// a second producer cannot share the directory
	if _, err := embedded.Open(ctx, embedded.Options{Args: []string{"-journal-dir=" + dir, "-etcd-endpoints="}, Getenv: func(string) string { return "" }}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open of a journal directory: %v", err)
	}
	r.Restart(t)
	deadline := time.Now().Add(20 * time.Second)
	for p.JournalDepth() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("journal not replayed in 20 s: depth %d", p.JournalDepth())
		}
		time.Sleep(50 * time.Millisecond)
	}
	info, err := p.Client().Get(ctx, "during")
	if err != nil || info.State != "scheduled" {
		t.Fatalf("journaled task after replay: %+v, %v", info, err)
	}
}

func TestCloseAndHandler(t *testing.T) {
	r := testenv.StartRedis(t)
	dir := t.TempDir()
	p := open(t, r, dir)
	// the handler serves /readyz and /metrics for the producer to mount
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	for _, path := range []string{"/readyz", "/metrics"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		_ = resp.Body.Close()
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := p.Schedule(context.Background(), task("late")); !errors.Is(err, embedded.ErrClosed) {
		t.Fatalf("schedule after close: %v", err)
	}
	if _, err := p.Client().Get(context.Background(), "late"); !errors.Is(err, embedded.ErrClosed) {
		t.Fatalf("client after close: %v", err)
	}
	// the journal directory is free again
	open(t, r, dir)
}

func TestOpenRefusesABadSetting(t *testing.T) {
	_, err := embedded.Open(t.Context(), embedded.Options{Args: []string{"-max-batch=0", "-journal-dir=" + t.TempDir()}, Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "max-batch") {
		t.Fatalf("open with max-batch 0: %v", err)
	}
}
