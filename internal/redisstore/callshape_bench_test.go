package redisstore

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkScheduleShapes measures redis-server CPU per task (INFO cpu) of
// the schedule script by the shape of its calls: g tasks per call, all in
// one shard or spread over 16 (so about min(g, 16) sections), with a due
// time or (the rows marked relative) a delay from Redis' clock, 30,000
// new tasks per shape from one connection, each shape on a fresh
// namespace.
// Comparing the rows splits a task's cost into the call's (dispatch,
// event loop, script set-up), the section's and the task's own: what a
// group of concurrent single schedules pays for being small and spread
// (docs/benchmarks.md, "Session 23").
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkScheduleShapes -benchtime 1x
func BenchmarkScheduleShapes(b *testing.B) {
	const n = 30000
	payload := bytes.Repeat([]byte("p"), 64)
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b)
		due := time.Now().Add(time.Hour)
		for k, shape := range []struct {
			g        int
			oneShard bool
			relative bool // a delay from Redis' clock (Submit.Relative), not a due time
		}{{1, false, false}, {5, true, false}, {5, false, false}, {5, false, true}, {16, true, false}, {16, false, false}, {64, false, false}, {1000, false, false}, {1000, false, true}} {
			s, err := New(b.Context(), rdb, Options{Namespace: "shape" + strconv.Itoa(k), Shards: 16})
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, 0, n)
			for j := 0; len(ids) < n; j++ {
				id := fmt.Sprintf("0192d3f4-%04x-7abc-8def-%012d", j%65536, j)
				if !shape.oneShard || s.Shard(id) == 0 {
					ids = append(ids, id)
				}
			}
			sections := 0
			cpu0, cs0 := testenv.RedisCPU(b, rdb), testenv.CommandStats(b, rdb)
			for i := 0; i < n; i += shape.g {
				subs := make([]Submit, 0, shape.g)
				shards := map[int]bool{}
				for _, id := range ids[i:min(i+shape.g, n)] {
					shards[s.Shard(id)] = true
					if shape.relative {
						subs = append(subs, Submit{Task: &task.Task{ID: id, Type: "bench", Payload: payload}, Delay: time.Hour, Relative: true})
					} else {
						subs = append(subs, Submit{Task: &task.Task{ID: id, Type: "bench", Payload: payload, DueAt: due}})
					}
				}
				sections += len(shards)
				if _, err := s.Schedule(b.Context(), subs); err != nil {
					b.Fatal(err)
				}
			}
			us := float64((testenv.RedisCPU(b, rdb) - cpu0).Microseconds()) / n
			spread, name := "16 shards", fmt.Sprintf("g%d-spread", shape.g)
			if shape.oneShard {
				spread, name = "one shard", fmt.Sprintf("g%d-one", shape.g)
			}
			if shape.relative {
				spread, name = spread+", relative", name+"-rel"
			}
			fmt.Printf("  %4d tasks/call, %-9s  %.2f sections/task  %6.2f us of redis-server CPU per task  (%s)\n",
				shape.g, spread, float64(sections)/n, us, testenv.CommandStatsDelta(cs0, testenv.CommandStats(b, rdb), n))
			b.ReportMetric(us, name+"-us/task")
		}
	}
}

// BenchmarkCallOverhead measures redis-server CPU per call (INFO cpu) of a
// script that does nothing ("return 1", 5 keys and 8 arguments, the shape
// of a one-task schedule call) from 1, 2, 4 and 16 connections at once,
// 40,000 calls each: what a call costs redis-server beyond its script
// (reading, parsing, dispatching, writing the reply, and the event loop's
// turn, which serves every connection that is ready at once) depends on
// how many calls arrive together.
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkCallOverhead -benchtime 1x
func BenchmarkCallOverhead(b *testing.B) {
	const n = 40000
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b)
		sc := redis.NewScript("return 1")
		if err := sc.Load(b.Context(), rdb).Err(); err != nil {
			b.Fatal(err)
		}
		keys := []string{"a", "b", "c", "d", "e"}
		for _, conns := range []int{1, 2, 4, 16} {
			var next atomic.Int64
			cpu0 := testenv.RedisCPU(b, rdb)
			t0 := time.Now()
			var wg sync.WaitGroup
			for range conns {
				wg.Go(func() {
					for next.Add(1) <= n {
						if err := sc.EvalSha(b.Context(), rdb, keys, 1, 2, 3, 4, 5, 6, 7, 8).Err(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			el := time.Since(t0)
			us := float64((testenv.RedisCPU(b, rdb) - cpu0).Microseconds()) / n
			fmt.Printf("  %2d connections: %6.2f us of redis-server CPU per call, %7.0f calls/s\n", conns, us, n/el.Seconds())
			b.ReportMetric(us, fmt.Sprintf("conns%d-us/call", conns))
		}
	}
}

// BenchmarkClaimFinishShapes measures redis-server CPU per task (INFO cpu)
// of a worker's claim and finish by the shape of its micro-batches: g
// fired tasks spread over 16 shards per ClaimMany and FinishMany (lean
// successes), with the shards' sections packed into one script call (a
// standalone redis-server) or one call per shard, all of a batch's calls
// in one pipeline (a node of a Redis Cluster, as bench-scale's one master:
// a call may not span slots). 64,000 tasks per shape, each on a fresh
// namespace, from one connection. It splits what a handled task costs
// Redis into the call's part and the task's (issue 46: bench-scale's
// handled phase pays ~0.07 claim calls per task, BenchmarkKeyLimits
// ~0.01).
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkClaimFinishShapes -benchtime 1x
func BenchmarkClaimFinishShapes(b *testing.B) {
	const n, shards = 64000, 16
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b)
		for k, shape := range []struct {
			g    int
			pack bool
		}{{16, true}, {16, false}, {224, true}, {224, false}, {1024, true}, {1024, false}} {
			s, err := New(b.Context(), rdb, Options{Namespace: "cfshape" + strconv.Itoa(k), Shards: shards})
			if err != nil {
				b.Fatal(err)
			}
			s.pack = shape.pack
			ids := scheduleBench(b, s, n, time.Now().Add(-time.Second))
			if got := drainShards(b, s, 1000, time.Hour); got != n {
				b.Fatalf("took %d of %d", got, n)
			}
			mixed := roundRobin(ids, n)
			cpu0, cs0 := testenv.RedisCPU(b, rdb), testenv.CommandStats(b, rdb)
			claimFinishBatches(b, s, mixed, shape.g)
			us := float64((testenv.RedisCPU(b, rdb) - cpu0).Microseconds()) / n
			calls, name := "one call", fmt.Sprintf("g%d-packed", shape.g)
			if !shape.pack {
				calls, name = "a call per shard", fmt.Sprintf("g%d-per-shard", shape.g)
			}
			fmt.Printf("  claim+finish, %4d tasks per batch, %-16s %6.2f us of redis-server CPU per task  (%s)\n",
				shape.g, calls, us, testenv.CommandStatsDelta(cs0, testenv.CommandStats(b, rdb), n))
			b.ReportMetric(us, name+"-us/task")
		}
	}
}

// roundRobin lists n of the ids of every shard (ids[shard]) taking one of
// each shard in turn, as a worker's fetch spreads over the shards.
func roundRobin(ids [][]string, n int) []string {
	var mixed []string
	for j := 0; len(mixed) < n; j++ {
		for sh := range ids {
			if j < len(ids[sh]) {
				mixed = append(mixed, ids[sh][j])
			}
		}
	}
	return mixed[:n]
}

// claimFinishBatches claims and finishes (lean successes, owner "o") the
// fired tasks ids in batches of g, one ClaimMany and one FinishMany each.
func claimFinishBatches(b *testing.B, s *Store, ids []string, g int) {
	for i := 0; i < len(ids); i += g {
		var cs []Claim
		var fs []Finish
		for _, id := range ids[i:min(i+g, len(ids))] {
			cs = append(cs, Claim{ID: id, TTL: 30 * time.Second, Owner: "o"})
			fs = append(fs, Finish{ID: id, Kind: Succeeded, Owner: "o"})
		}
		if _, err := s.ClaimMany(b.Context(), cs); err != nil {
			b.Fatal(err)
		}
		res, err := s.FinishMany(b.Context(), fs)
		if err != nil {
			b.Fatal(err)
		}
		if res[0].State != task.StateSucceeded {
			b.Fatalf("finish: %+v", res[0])
		}
	}
}

// drainShards fires every due task of every shard of s (Store.Take, batch per
// call, with a lease of lease) and returns how many it took.
func drainShards(b *testing.B, s *Store, batch int, lease time.Duration) int {
	taken := 0
	eachTake(b, s, batch, lease, func(_ int, t Taken) { taken += len(t.Tasks) })
	return taken
}

// eachTake takes every due task of every shard of s (token 1, batch per
// take, with a lease of lease) and hands each take that took some to f.
func eachTake(b *testing.B, s *Store, batch int, lease time.Duration, f func(shard int, t Taken)) {
	for sh := range s.Shards() {
		for {
			t, err := s.Take(b.Context(), sh, 1, batch, lease)
			if err != nil {
				b.Fatal(err)
			}
			if len(t.Tasks) == 0 {
				break
			}
			f(sh, t)
		}
	}
}
