package redisstore

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkMemoryPerTask schedules 1,000,000 pending tasks (36-character
// UUID-like ids, 64-byte payload, type "order.cancel", 16 shards) on a fresh
// redis-server and reports INFO memory used_memory growth per task
// (DQ_BENCH_TASKS overrides the count).
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkMemoryPerTask -benchtime 1x
func BenchmarkMemoryPerTask(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("DQ_BENCH_TASKS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b)
		s, err := New(b.Context(), rdb, Options{Namespace: "mem"})
		if err != nil {
			b.Fatal(err)
		}
		before := usedMemory(b, rdb)
		payload := bytes.Repeat([]byte("p"), 64)
		due := time.Now().Add(24 * time.Hour)
		subs := make([]Submit, 0, 1000)
		for i := 0; i < n; i += 1000 {
			subs = subs[:0]
			for j := i; j < i+1000; j++ {
				id := fmt.Sprintf("0192d3f4-%04x-7abc-8def-%012d", j%65536, j)
				subs = append(subs, Submit{Task: &task.Task{ID: id, Type: "order.cancel", Payload: payload, DueAt: due.Add(time.Duration(j) * time.Millisecond)}})
			}
			if _, err := s.Schedule(b.Context(), subs); err != nil {
				b.Fatal(err)
			}
		}
		after := usedMemory(b, rdb)
		per := float64(after-before) / float64(n)
		b.ReportMetric(per, "bytes/task")
		b.Logf("method: %d tasks, 36-byte ids, 64-byte payload, 16 shards; INFO memory used_memory delta / tasks = %.1f bytes/task", n, per)
	}
}

func usedMemory(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	info, err := rdb.Info(tb.Context(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkTakeAck measures the Redis CPU the fire path costs per task:
// 200,000 tasks due now (16 shards, 36-byte ids, 100-byte payload) are
// taken in batches of 500, then every take is settled (all confirmed, what
// a poller does after Kafka answered); redis-server's own CPU time
// (INFO cpu) is read around each phase, so the figure hardly depends on
// what else the machine runs.
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkTakeAck -benchtime 1x
func BenchmarkTakeAck(b *testing.B) {
	const n, batch, shards = 200_000, 500, 16
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b)
		s, err := New(b.Context(), rdb, Options{Namespace: "fire", Shards: shards})
		if err != nil {
			b.Fatal(err)
		}
		scheduleBench(b, s, n, time.Now().Add(-time.Second))
		type took struct {
			shard int
			lease string
			n     int
		}
		var all []took
		cpu0 := testenv.RedisCPU(b, rdb)
		taken := 0
		for sh := range shards {
			for {
				t, err := s.Take(b.Context(), sh, 1, batch, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if len(t.Tasks) == 0 {
					break
				}
				all = append(all, took{sh, t.Lease, len(t.Tasks)})
				taken += len(t.Tasks)
			}
		}
		cpu1 := testenv.RedisCPU(b, rdb)
		acked := 0
		for _, t := range all {
			k, _, err := s.Settle(b.Context(), t.shard, 1, t.lease, nil)
			if err != nil {
				b.Fatal(err)
			}
			if k != t.n {
				b.Fatalf("settle of %d claims fired %d", t.n, k)
			}
			acked += k
		}
		cpu2 := testenv.RedisCPU(b, rdb)
		takeUS := float64((cpu1 - cpu0).Microseconds()) / n
		ackUS := float64((cpu2 - cpu1).Microseconds()) / n
		if taken != n || acked != n {
			b.Fatalf("took %d, acked %d of %d (take %.2f us, ack %.2f us per task)", taken, acked, n, takeUS, ackUS)
		}
		b.ReportMetric(takeUS, "take-redis-us/task")
		b.ReportMetric(ackUS, "settle-redis-us/task")
		b.Logf("method: %d tasks due now, takes of %d then settles, redis-server CPU (INFO cpu) per task: take %.2f us, settle %.2f us", n, batch, takeUS, ackUS)
	}
}

// scheduleBench schedules n tasks due at due (36-character UUID-like ids,
// 100-byte payload, type "bench") in calls of 1000 and returns their ids
// by shard.
func scheduleBench(b testing.TB, s *Store, n int, due time.Time) [][]string {
	b.Helper()
	payload := bytes.Repeat([]byte("p"), 100)
	ids := make([][]string, s.Shards())
	subs := make([]Submit, 0, 1000)
	for i := 0; i < n; i += 1000 {
		subs = subs[:0]
		for j := i; j < min(i+1000, n); j++ {
			id := fmt.Sprintf("0192d3f4-%04x-7abc-8def-%012d", j%65536, j)
			ids[s.Shard(id)] = append(ids[s.Shard(id)], id)
			subs = append(subs, Submit{Task: &task.Task{ID: id, Type: "bench", Payload: payload, DueAt: due}})
		}
		if _, err := s.Schedule(b.Context(), subs); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}
