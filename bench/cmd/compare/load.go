package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/stats"
	"github.com/delayq/delayq/client"
)

// payloadJSON is delayq's 64-byte payload (a JSON string); asynq gets the
// same 64 bytes.
var payloadJSON = json.RawMessage(`"` + strings.Repeat("p", 62) + `"`)

// calls is the outcome of many concurrent calls.
type calls struct {
	elapsed  time.Duration
	lat      []time.Duration
	errs     int
	firstErr error
}

// run calls fn(0..n-1) from workers goroutines and measures every call.
func run(workers, n int, fn func(i int) error) calls {
	var next atomic.Int64
	var mu sync.Mutex
	var out calls
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			lat := make([]time.Duration, 0, n/workers+1)
			var errs int
			var first error
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					break
				}
				t0 := time.Now()
				err := fn(i)
				lat = append(lat, time.Since(t0))
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
				}
			}
			mu.Lock()
			out.lat = append(out.lat, lat...)
			out.errs += errs
			if out.firstErr == nil {
				out.firstErr = first
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

func (c calls) quantilesMs() (p50, p99 float64) {
	s := stats.Summarize(c.lat)
	return s.P50ms, s.P99ms
}

// dqTask is a delayq task with a fresh UUID id, due in delay.
func dqTask(delay time.Duration) client.Task {
	return client.Task{ID: uuid.NewString(), Type: taskType, Payload: payloadJSON, Delay: delay}
}

// dqBody is the JSON of one task for the raw API, due in delay.
func dqBody(delay string) []byte {
	return []byte(`{"id":"` + uuid.NewString() + `","type":"` + taskType + `","payload":` + string(payloadJSON) + `,"delay":"` + delay + `"}`)
}

func dqBatchBody(n int, delay string) []byte {
	var buf bytes.Buffer
	buf.Grow(n * 140)
	buf.WriteString(`{"tasks":[`)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(dqBody(delay))
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// post sends body and checks the status and that no task was refused or
// journaled (a journaled task is not in Redis yet).
func post(hc *http.Client, url string, body []byte, want int) error {
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s: %d %.200s", url, resp.StatusCode, out)
	}
	if bytes.Contains(out, []byte(`"error"`)) || bytes.Contains(out, []byte(`journaled`)) {
		return fmt.Errorf("%s: not every task was scheduled: %.200s", url, out)
	}
	return nil
}

// scheduleBatch schedules tasks through the Go client and counts refused
// tasks as errors.
func scheduleBatch(b *bench, c *client.Client, tasks []client.Task) error {
	res, err := c.ScheduleBatch(b.ctx(), tasks)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("task %s: %w", r.ID, r.Err)
		}
		if r.Journaled() {
			return fmt.Errorf("task %s journaled (Redis too slow for the daemon's timeout)", r.ID)
		}
	}
	return nil
}

// aqTask is an asynq task with the 64-byte payload.
func aqTask() *asynq.Task { return asynq.NewTask(taskType, []byte(payloadJSON)) }
