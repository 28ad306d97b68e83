package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkListPage measures one page of GET /v1/tasks (Store.List) over
// 16 shards holding 20,000 scheduled tasks: the first page and a page
// from a cursor in the middle, of 100 and of 1000 tasks. It reports the
// round trips (a pipeline is one) and the commands a page sends.
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkListPage -benchtime 200x
func BenchmarkListPage(b *testing.B) {
	const n = 20000
	rdb := testenv.StartRedis(b).Client(b)
	s, err := New(b.Context(), rdb, Options{Namespace: "listbench", Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for i := 0; i < n; i += 1000 {
		subs := make([]Submit, 0, 1000)
		for j := i; j < i+1000; j++ {
			subs = append(subs, Submit{Task: mk(fmt.Sprintf("lb-%d", j), due.Add(time.Duration(j)*time.Millisecond))})
		}
		if _, err := s.Schedule(b.Context(), subs); err != nil {
			b.Fatal(err)
		}
	}
	var hook countHook
	rdb.AddHook(&hook)
	for _, limit := range []int{100, 1000} {
		mid, err := s.List(b.Context(), ListQuery{State: task.StateScheduled, Limit: n / 2})
		if err != nil || mid.Next == "" {
			b.Fatalf("mid: %v", err)
		}
		for _, at := range []struct{ name, cursor string }{{"first", ""}, {"middle", mid.Next}} {
			b.Run(fmt.Sprintf("limit=%d/%s", limit, at.name), func(b *testing.B) {
				q := ListQuery{State: task.StateScheduled, Limit: limit, Cursor: at.cursor}
				hook.trips.Store(0)
				hook.cmds.Store(0)
				for b.Loop() {
					p, err := s.List(b.Context(), q)
					if err != nil || len(p.Tasks) != limit {
						b.Fatalf("%d tasks, %v", len(p.Tasks), err)
					}
				}
				b.ReportMetric(float64(hook.trips.Load())/float64(b.N), "trips/page")
				b.ReportMetric(float64(hook.cmds.Load())/float64(b.N), "cmds/page")
			})
		}
	}
}

// countHook counts round trips and commands.
type countHook struct{ trips, cmds atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
