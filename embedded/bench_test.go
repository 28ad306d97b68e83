package embedded_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkSchedule measures Producer.Schedule from 16 goroutines (a
// closed loop, as bench/compare's single-schedule rows) on a real
// redis-server with 16 shards, and prints tasks/s with the CPU per task
// of redis-server (INFO cpu) and of this process (testenv.ProcessCPU), and
// with -v where redis-server's time went, by command:
//
//	go test ./embedded -run '^$' -bench BenchmarkSchedule -benchtime 50000x
func BenchmarkSchedule(b *testing.B) {
	r := testenv.StartRedis(b)
	p := open(b, r, b.TempDir(), "-shards=16")
	rdb := r.Client(b)
	const callers = 16
	tasks := make([]client.Task, b.N)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("bench-%d", i), Type: "email",
			Payload: json.RawMessage(`{"order":12345,"note":"benchmark payload of about sixty-four bytes"}`), Delay: time.Hour}
	}
	var next atomic.Int64
	go0, cpu0, cmds0 := testenv.ProcessCPU(), testenv.RedisCPU(b, rdb), testenv.CommandStats(b, rdb)
	b.ResetTimer()
	t0 := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				if _, err := p.Schedule(b.Context(), tasks[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(t0)
	b.StopTimer()
	redisUS := float64((testenv.RedisCPU(b, rdb) - cpu0).Microseconds()) / float64(b.N)
	goUS := float64((testenv.ProcessCPU() - go0).Microseconds()) / float64(b.N)
	b.Logf("redis-server per task, by command: %s", testenv.CommandStatsDelta(cmds0, testenv.CommandStats(b, rdb), b.N))
	b.ReportMetric(float64(b.N)/el.Seconds(), "tasks/s")
	b.ReportMetric(redisUS, "redis-us/task")
	b.ReportMetric(goUS, "go-us/task")
}
