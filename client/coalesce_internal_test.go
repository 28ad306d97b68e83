package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A call still waiting for a group when its context ends returns at once
// and its task is never sent.
func TestScheduleCoalescingCancelledWhileQueued(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		for _, id := range []string{"q-0", "q-1", "q-2", "q-3", "late"} {
			if strings.Contains(string(b), `"`+id+`"`) {
				seen[id] = true
			}
		}
		mu.Unlock()
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"x","state":"scheduled","outcome":"created","due_at":"2030-01-01T00:00:00Z","shard":0}`)
	}))
	defer srv.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before srv.Close: its handlers wait for it
	c := New(srv.URL)
	var wg sync.WaitGroup
	for i := range coalesceInflight { // every request slot busy, one task each
		wg.Go(func() {
			if _, err := c.Schedule(t.Context(), Task{ID: fmt.Sprintf("q-%d", i), Type: "t"}); err != nil {
				t.Errorf("q-%d: %v", i, err)
			}
		})
		waitCond(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == i+1 })
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Schedule(ctx, Task{ID: "late", Type: "t"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("queued call whose context ended: %v after %v", err, time.Since(start))
	}
	unblock()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if seen["late"] {
		t.Fatal("the task of a call that gave up while queued was sent")
	}
}

func waitCond(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
