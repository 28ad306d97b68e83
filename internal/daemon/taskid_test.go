package daemon

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// TestTaskIDsThroughTheClient: every id the daemon accepts can be read,
// rescheduled and cancelled through the Go client, and the ids no URL can
// carry as the {id} segment ("/", ".", "..") are refused at every entry
// point, naming the field, changing nothing.
func TestTaskIDsThroughTheClient(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	rdb := r.Client(t)
	st := openStore(t, rdb, cfg)
	c := client.New(app.base, client.WithoutScheduleCoalescing(), client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	due := time.Now().Add(time.Hour)

	// roundTrip reads, reschedules and cancels id through the client.
	roundTrip := func(t *testing.T, id string) {
		t.Helper()
		got, err := c.Get(t.Context(), id)
		if err != nil || got.ID != id || got.State != string(task.StateScheduled) {
			t.Fatalf("Get(%q) = %+v, %v; want the scheduled task", id, got, err)
		}
		if _, err := c.RescheduleIn(t.Context(), id, 2*time.Hour); err != nil {
			t.Fatalf("RescheduleIn(%q): %v", id, err)
		}
		if err := c.Cancel(t.Context(), id); err != nil {
			t.Fatalf("Cancel(%q): %v", id, err)
		}
		if got, err := c.Get(t.Context(), id); err != nil || got.ID != id || got.State != string(task.StateCancelled) {
			t.Fatalf("Get(%q) after Cancel = %+v, %v; want it cancelled", id, got, err)
		}
	}

	addressable := []string{"a/b", "%", "?", "#", "a/..", "./a", "a/.", "a//b", "/a", "a/", "//", "...", "%2E", "%2F", "é", ":a"}
	for _, id := range addressable {
		t.Run("schedule "+id, func(t *testing.T) {
			if _, err := c.Schedule(t.Context(), client.Task{ID: id, Type: "t", DueAt: due}); err != nil {
				t.Fatalf("Schedule(%q): %v", id, err)
			}
			roundTrip(t, id)
		})
	}
	t.Run("batch", func(t *testing.T) {
		tasks := make([]client.Task, len(addressable))
		for i, id := range addressable {
			tasks[i] = client.Task{ID: "batch" + id, Type: "t", DueAt: due}
		}
		res, err := c.ScheduleBatch(t.Context(), tasks)
		if err != nil {
			t.Fatalf("ScheduleBatch: %v", err)
		}
		for i, x := range res {
			if x.Err != nil {
				t.Fatalf("ScheduleBatch item %q: %v", tasks[i].ID, x.Err)
			}
			roundTrip(t, tasks[i].ID)
		}
	})

	refused := []string{"/", ".", ".."}
	wantRefusal := func(t *testing.T, id string, err error) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != "invalid_task" ||
			!strings.HasPrefix(ae.Message, `id: must not be "`+id+`"`) {
			t.Fatalf("id %q: got %v, want 422 invalid_task naming the id", id, err)
		}
	}
	t.Run("refused", func(t *testing.T) {
		before := keyCount(t, rdb, cfg.Namespace)
		for _, id := range refused {
			_, err := c.Schedule(t.Context(), client.Task{ID: id, Type: "t", DueAt: due})
			wantRefusal(t, id, err)
			rp := app.do(http.MethodPost, "/v1/tasks", `{"id":"`+id+`","type":"t","delay":"1h"}`)
			if rp.Status != http.StatusUnprocessableEntity || rp.errCode() != "invalid_task" || !strings.HasPrefix(rp.errMessage(), "id: ") {
				t.Fatalf("POST /v1/tasks id %q: %d %s", id, rp.Status, rp.Raw)
			}
		}
		if after := keyCount(t, rdb, cfg.Namespace); after != before {
			t.Fatalf("refused schedules changed the store: %d keys, then %d", before, after)
		}
		tasks := []client.Task{{ID: "batch-ok", Type: "t", DueAt: due}}
		for _, id := range refused {
			tasks = append(tasks, client.Task{ID: id, Type: "t", DueAt: due})
		}
		res, err := c.ScheduleBatch(t.Context(), tasks)
		if err != nil {
			t.Fatalf("ScheduleBatch: %v", err)
		}
		if res[0].Err != nil {
			t.Fatalf("the batch's valid item: %v", res[0].Err)
		}
		for i, id := range refused {
			wantRefusal(t, id, res[i+1].Err)
			if _, err := st.Get(t.Context(), id); !errors.Is(err, redisstore.ErrNotFound) {
				t.Fatalf("refused id %q is stored: %v", id, err)
			}
		}
	})
}

// TestStoredUnaddressableIDs: tasks stored with the ids the daemon now
// refuses (before it did) keep working: the Go client reaches "." and ".."
// escaped, and a bulk request's ids reach every one of them.
func TestStoredUnaddressableIDs(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	c := client.New(app.base, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var subs []redisstore.Submit
	for _, id := range []string{"/", ".", "..", "dot", "dotdot"} {
		subs = append(subs, redisstore.Submit{Task: &task.Task{ID: id, Type: "t", DueAt: due}})
	}
	if _, err := st.Schedule(t.Context(), subs); err != nil {
		t.Fatalf("store: %v", err)
	}
	for _, id := range []string{".", ".."} {
		got, err := c.Get(t.Context(), id)
		if err != nil || got.ID != id {
			t.Fatalf("Get(%q) = %+v, %v", id, got, err)
		}
	}
	if err := c.Cancel(t.Context(), ".."); err != nil {
		t.Fatalf(`Cancel(".."): %v`, err)
	}
	n, err := c.CancelTasks(t.Context(), client.Selection{IDs: []string{"/", "."}})
	if err != nil || n != 2 {
		t.Fatalf("CancelTasks = %d, %v; want 2", n, err)
	}
	for _, id := range []string{"/", ".", ".."} {
		tk, err := st.Get(t.Context(), id)
		if err != nil || tk.State != task.StateCancelled {
			t.Fatalf("%q after cancel: %+v, %v", id, tk, err)
		}
	}
}
