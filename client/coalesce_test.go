package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/task"
)

// pathCounter counts the requests per "METHOD path" and their answers'
// status codes.
type pathCounter struct {
	mu     sync.Mutex
	paths  map[string]int
	status map[int]int
}

func (p *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paths == nil {
		p.paths, p.status = map[string]int{}, map[int]int{}
	}
	p.paths[r.Method+" "+r.URL.Path]++
	if err == nil {
		p.status[resp.StatusCode]++
	}
	return resp, err
}

func (p *pathCounter) get(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paths[path]
}

// scheduleAll runs Schedule for every task from g goroutines and returns
// the results and errors by index.
func scheduleAll(ctx context.Context, c *client.Client, tasks []client.Task, g int) ([]client.Result, []error) {
	res, errs := make([]client.Result, len(tasks)), make([]error, len(tasks))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(tasks) {
					return
				}
				res[i], errs[i] = c.Schedule(ctx, tasks[i])
			}
		})
	}
	wg.Wait()
	return res, errs
}

// Concurrent Schedule calls share batch requests, and each call still gets
// its own task's result, or its own error with the status the task gets
// alone; calls one at a time go alone (POST /v1/tasks), as before.
func TestScheduleCoalescesConcurrentCalls(t *testing.T) {
	url, st := startDaemon(t, "")
	ctx := t.Context()
	pc := &pathCounter{}
	c := client.New(url, client.WithHTTPClient(&http.Client{Transport: pc, Timeout: 30 * time.Second}))

	for i := range 5 {
		if _, err := c.Schedule(ctx, client.Task{ID: fmt.Sprintf("seq-%d", i), Type: "t", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := pc.get("POST /v1/tasks"), pc.get("POST /v1/tasks/batch"); n != 5 || b != 0 {
		t.Fatalf("sequential calls: %d single and %d batch requests, want 5 and 0", n, b)
	}

	const n = 1200
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("co-%d", i), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Delay: time.Hour}
		if i%10 == 3 {
			tasks[i].Type = "" // refused: 422 invalid_task, alone or in a group
		}
	}
	res, errs := scheduleAll(ctx, c, tasks, 64)
	for i := range tasks {
		if i%10 == 3 {
			var ae *client.APIError
			if !errors.As(errs[i], &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != "invalid_task" {
				t.Fatalf("task %d: %v, want a 422 invalid_task", i, errs[i])
			}
			continue
		}
		if errs[i] != nil || res[i].ID != tasks[i].ID || res[i].Outcome != "created" || res[i].State != "scheduled" {
			t.Fatalf("task %d: %+v %v", i, res[i], errs[i])
		}
	}
	for i := range tasks {
		tk, err := st.Get(ctx, tasks[i].ID)
		if i%10 == 3 {
			if err == nil {
				t.Fatalf("refused task %d stored: %+v", i, tk)
			}
			continue
		}
		if err != nil || tk.State != task.StateScheduled || string(tk.Payload) != string(tasks[i].Payload) {
			t.Fatalf("task %d in Redis: %+v %v", i, tk, err)
		}
	}
	single, batch := pc.get("POST /v1/tasks")-5, pc.get("POST /v1/tasks/batch")
	t.Logf("%d concurrent calls went out as %d single and %d batch requests", n, single, batch)
	if batch == 0 || single+batch >= n/2 {
		t.Fatalf("%d calls from 64 goroutines made %d single and %d batch requests: not coalesced", n, single, batch)
	}

	// without coalescing, every call is its own request
	pc2 := &pathCounter{}
	c2 := client.New(url, client.WithoutScheduleCoalescing(), client.WithHTTPClient(&http.Client{Transport: pc2, Timeout: 30 * time.Second}))
	_, errs = scheduleAll(ctx, c2, tasks[:200], 32)
	for i, err := range errs {
		if (i%10 == 3) != (err != nil) {
			t.Fatalf("uncoalesced task %d: %v", i, err)
		}
	}
	if s, b := pc2.get("POST /v1/tasks"), pc2.get("POST /v1/tasks/batch"); s != 200 || b != 0 {
		t.Fatalf("WithoutScheduleCoalescing: %d single and %d batch requests, want 200 and 0", s, b)
	}
}

// A daemon that refuses the groups for their size (DQ_MAX_BATCH smaller
// than a group) stores nothing of them: the client sends their tasks
// alone, and from then on every task.
func TestScheduleCoalescingFallsBackToSingles(t *testing.T) {
	url, st := startDaemonWith(t, "", func(c *daemon.Config) { c.MaxBatch = 1 })
	ctx := t.Context()
	pc := &pathCounter{}
	c := client.New(url, client.WithHTTPClient(&http.Client{Transport: pc, Timeout: 30 * time.Second}))
	tasks := make([]client.Task, 300)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("fb-%d", i), Type: "t", Delay: time.Hour}
	}
	res, errs := scheduleAll(ctx, c, tasks, 32)
	for i := range tasks {
		if errs[i] != nil || res[i].Outcome != "created" {
			t.Fatalf("task %d: %+v %v", i, res[i], errs[i])
		}
		if _, err := st.Get(ctx, tasks[i].ID); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	pc.mu.Lock()
	refused := pc.status[http.StatusRequestEntityTooLarge]
	pc.mu.Unlock()
	if b := pc.get("POST /v1/tasks/batch"); b < 1 || refused != b {
		t.Fatalf("%d batch requests, %d refused with 413: want at least one, all refused", b, refused)
	}
}
