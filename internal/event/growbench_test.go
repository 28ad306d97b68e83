package event

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkGrowShards measures an online growth of the shard map (issue
// #17) on this machine, with a real redis-server, embedded etcd, the
// in-process kfake broker and 2 in-process event processes:
//
//   - a namespace of 16 shards holds P pending tasks due in 24h
//     (P = 1,000,000; DQ_BENCH_GROW_PENDING overrides), scheduled before
//     the processes start;
//   - a stream of 2,000 tasks/s (20 every 10ms, open loop) due 1..2s after
//     their schedule call by Redis' clock fires through both processes into
//     kfake; a franz-go consumer reads them live, and a task's lag is the
//     time the consumer sees its first record - its dq-due-at header; a
//     no-op worker finishes every record read (Store.FinishMany), since a
//     fired task moves only once finished;
//   - (a) baseline: the tasks of the stream due in a 10s window before any
//     migration;
//   - (b) growth: 16 -> 64 the way the daemon's PUT /v1/shards does it
//     (shardmap.Etcd.Grow, then Store.PublishMap and Store.StampShards of
//     the old shards), the stream still running; time to stable is from
//     the Grow call until etcd holds the settled map (polled every 20ms);
//     moved/s = the tasks the movers moved (delayq_event_tasks_moved_total of
//     both processes) / time to stable; the lag of the stream's tasks due
//     between the Grow call and stable.
//
// Sanity checks (not timings): every stream task reaches the consumer, the
// map settles at 64, and the movers moved at least the pending tasks whose
// shard changed.
//
// Run: DQ_BENCH_GROW_PENDING=200000 go test ./internal/event -run '^$'
// -bench BenchmarkGrowShards -benchtime 1x -timeout 20m
func BenchmarkGrowShards(b *testing.B) {
	pending := 1_000_000
	if v := os.Getenv("DQ_BENCH_GROW_PENDING"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("DQ_BENCH_GROW_PENDING=%q: want a count", v)
		}
		pending = n
	}
	load, _ := os.ReadFile("/proc/loadavg")
	say(b, "machine: %d CPUs (%s), GOMAXPROCS %d, load average %s", runtime.NumCPU(), cpuModel(),
		runtime.GOMAXPROCS(0), strings.TrimSpace(string(load)))
	for range b.N {
		benchGrow(b, pending)
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	info, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// streamLag is one stream task as the consumer saw it first.
type streamLag struct {
	due time.Time
	lag time.Duration
}

func benchGrow(b *testing.B, pending int) {
	const (
		from, to  = 16, 64
		rate      = 2000
		tick      = 10 * time.Millisecond
		perTick   = rate * int(tick) / int(time.Second)
		warmup    = 2500 * time.Millisecond // the first stream tasks are due after 1..2s
		baseline  = 10 * time.Second
		afterward = 2 * time.Second // the stream runs on after stable
	)
	w := newWorld(b, from)
	ctx := b.Context()

	// P pending tasks, due far away, before the processes start.
	t0 := time.Now()
	schedulePending(b, w, pending)
	say(b, "scheduled %d pending tasks (due in 24h) on %d shards in %v", pending, from, time.Since(t0).Round(time.Millisecond))
	var foreign int // pending tasks whose shard changes at 16 -> 64
	for i := range pending {
		if id := pendingID(i); shardmap.ShardOf(id, to) != shardmap.ShardOf(id, from) {
			foreign++
		}
	}

	a1 := w.startAppConfig(benchConfig(w, "grow-a"))
	a2 := w.startAppConfig(benchConfig(w, "grow-b"))
	w.waitBalanced(30*time.Second, a1, a2)

	// The consumer: first record of every stream task.
	cl := w.kafka.Client(b, kgo.ConsumeTopics(task.DefaultTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	var (
		mu    sync.Mutex
		seen  = map[string]streamLag{}
		dups  int
		early int
	)
	// A no-op worker finishes every record it reads (a fired task stays
	// in flight, unmoved, until its worker finishes it), off the
	// consumer's goroutine so that the lag is the consumer's alone.
	var finishErrs atomic.Int64
	toFinish := make(chan []redisstore.Finish, 1024)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for fs := range toFinish {
			res, err := w.store.FinishMany(context.WithoutCancel(ctx), fs)
			if err != nil {
				finishErrs.Add(int64(len(fs)))
				continue
			}
			for _, r := range res {
				if r.Err != nil {
					finishErrs.Add(1)
				}
			}
		}
	}()
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		defer close(toFinish)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			var done []redisstore.Finish
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				id := hdr(r, record.HeaderID)
				sh, _ := strconv.Atoi(hdr(r, record.HeaderShard))
				done = append(done, redisstore.Finish{ID: id, Gen: uint64(hdrInt(r, record.HeaderGen)), Kind: redisstore.Succeeded,
					Shard: sh, ShardSet: true})
				if _, ok := seen[id]; ok {
					dups++
					return
				}
				due := time.UnixMilli(hdrInt(r, record.HeaderDueAt))
				if now.Before(due) {
					early++
				}
				seen[id] = streamLag{due: due, lag: now.Sub(due)}
			})
			mu.Unlock()
			if len(done) > 0 {
				toFinish <- done
			}
		}
	}()
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	// The stream, open loop, until stopStream.
	var (
		scheduled  atomic.Int64
		lateTicks  atomic.Int64
		streamErrs atomic.Int64
		stopStream = make(chan struct{})
		streamDone = make(chan struct{})
	)
	payload := []byte(strings.Repeat("s", 100))
	go func() {
		defer close(streamDone)
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for n := 0; ; {
			select {
			case <-stopStream:
				return
			case <-ticker.C:
			}
			subs := make([]redisstore.Submit, perTick)
			for i := range subs {
				subs[i] = redisstore.Submit{
					Task:     &task.Task{ID: "s-" + strconv.Itoa(n), Type: "bench", Payload: payload, DueAt: time.Now()},
					Delay:    time.Second + time.Duration(n%1000)*time.Millisecond, // 1..2s, evenly
					Relative: true,
				}
				n++
			}
			c0 := time.Now()
			res, err := w.store.Schedule(ctx, subs)
			if time.Since(c0) > tick {
				lateTicks.Add(1)
			}
			if err != nil {
				streamErrs.Add(int64(len(subs)))
				continue
			}
			for _, r := range res {
				if r.Err != nil {
					streamErrs.Add(1)
				} else {
					scheduled.Add(1)
				}
			}
		}
	}()

	streamStart := time.Now()
	baseFrom := streamStart.Add(warmup)
	baseTo := baseFrom.Add(baseline)
	time.Sleep(time.Until(baseTo))
	baseScheduled, baseLate := scheduled.Load(), lateTicks.Load()

	// (b) Grow as handlePutShards does: etcd, the mirror, the old shards' stamps.
	me := shardmap.Etcd{Client: w.ec, Namespace: w.ns}
	redisCPU0, procCPU0 := testenv.RedisCPU(b, w.store.Client()), testenv.ProcessCPU()
	growAt := time.Now()
	m, err := me.Grow(ctx, to)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.store.PublishMap(ctx, m); err != nil {
		b.Fatal(err)
	}
	old := make([]int, m.Previous)
	for i := range old {
		old[i] = i
	}
	if err := w.store.StampShards(ctx, m, old); err != nil {
		b.Fatal(err)
	}
	published := time.Since(growAt)
	var stableAt time.Time
	lastTrace := growAt
	if !pollEvery(15*time.Minute, 20*time.Millisecond, func() bool {
		cur, _, ok, err := me.Load(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if ok && cur.Epoch == m.Epoch && !cur.Migrating() {
			stableAt = time.Now()
			return true
		}
		if time.Since(lastTrace) >= 5*time.Second {
			lastTrace = time.Now()
			pr, _ := w.store.GrowProgress(ctx, m)
			say(b, "(b) %v after Grow: moved %d, remaining about %d", time.Since(growAt).Round(time.Second), pr.Moved, pr.Remaining)
		}
		return false
	}) {
		b.Fatal("the map did not settle within 15 minutes")
	}
	toStable := stableAt.Sub(growAt)
	redisBusy, procBusy := testenv.RedisCPU(b, w.store.Client())-redisCPU0, testenv.ProcessCPU()-procCPU0
	moved := counterValue(a1.grow.moved) + counterValue(a2.grow.moved)
	pr, err := w.store.GrowProgress(ctx, m)
	if err != nil {
		b.Fatal(err)
	}
	growScheduled, growLate := scheduled.Load()-baseScheduled, lateTicks.Load()-baseLate

	time.Sleep(afterward)
	close(stopStream)
	<-streamDone
	n := int(scheduled.Load())
	if !pollEvery(60*time.Second, 20*time.Millisecond, func() bool { return distinct() >= n }) {
		b.Fatalf("only %d of %d stream tasks reached the consumer within 60s after the stream stopped", distinct(), n)
	}
	stopConsumer()
	<-consumed
	<-finished
	leading := []int{len(a1.Leading()), len(a2.Leading())}

	var base, grow []time.Duration
	mu.Lock()
	for _, s := range seen {
		switch {
		case !s.due.Before(baseFrom) && s.due.Before(baseTo):
			base = append(base, s.lag)
		case !s.due.Before(growAt) && s.due.Before(stableAt):
			grow = append(grow, s.lag)
		}
	}
	nDups, nEarly := dups, early
	mu.Unlock()
	bp50, bp99, bmax := quantiles(base)
	gp50, gp99, gmax := quantiles(grow)
	movedPerSec := moved / toStable.Seconds()

	say(b, "method: %d pending tasks due in 24h on %d shards, 2 event processes, a stream of %d tasks/s due 1..2s ahead; lag = consumer's poll time - dq-due-at (ms); grow %d -> %d like PUT /v1/shards",
		pending, from, rate, from, to)
	say(b, "(a) baseline: %d stream tasks due in a %v window without a migration: lag p50=%v p99=%v max=%v; %d schedule calls slower than the %v tick",
		len(base), baseline, bp50, bp99, bmax, baseLate, tick)
	say(b, "(b) growth: Grow + mirror + stamps took %v; stable after %v; moved %.0f tasks (GrowProgress: %d; pending tasks whose shard changed: %d) = %.0f moved/s",
		published.Round(time.Millisecond), toStable.Round(time.Millisecond), moved, pr.Moved, foreign, movedPerSec)
	say(b, "(b) growth: %d stream tasks due during the migration: lag p50=%v p99=%v max=%v; stream scheduled %d tasks (%.0f/s) meanwhile, %d schedule calls slower than the tick",
		len(grow), gp50, gp99, gmax, growScheduled, float64(growScheduled)/toStable.Seconds(), growLate)
	say(b, "(b) during the migration: redis-server CPU %v (%.0f%% of one core), this process (2 event processes, kfake, consumer, stream) %v (%.0f%% of one core)",
		redisBusy.Round(time.Millisecond), 100*redisBusy.Seconds()/toStable.Seconds(), procBusy.Round(time.Millisecond), 100*procBusy.Seconds()/toStable.Seconds())
	say(b, "stream: %d tasks scheduled, %d schedule errors, %d consumed, %d duplicate records, %d seen before their due time, %d finish errors; shards led after: %v",
		n, streamErrs.Load(), distinct(), nDups, nEarly, finishErrs.Load(), leading)

	if moved < float64(foreign) {
		b.Errorf("the movers moved %.0f tasks, fewer than the %d pending tasks whose shard changed", moved, foreign)
	}
	if streamErrs.Load() > 0 {
		b.Errorf("%d stream tasks were refused", streamErrs.Load())
	}
	b.ReportMetric(movedPerSec, "moved/s")
	b.ReportMetric(toStable.Seconds(), "stable-s")
	b.ReportMetric(ms(bp50), "base-p50-ms")
	b.ReportMetric(ms(bp99), "base-p99-ms")
	b.ReportMetric(ms(gp50), "grow-p50-ms")
	b.ReportMetric(ms(gp99), "grow-p99-ms")
	a1.stop(b)
	a2.stop(b)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pendingID(i int) string { return fmt.Sprintf("p-%07d", i) }

// schedulePending schedules n tasks due in 24h, 4 calls of 2,000 at a time.
func schedulePending(b *testing.B, w *world, n int) {
	const chunk, workers = 2000, 4
	due := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	payload := []byte(strings.Repeat("p", 100))
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(chunk)) - chunk
				if lo >= n {
					return
				}
				subs := make([]redisstore.Submit, 0, chunk)
				for i := lo; i < min(lo+chunk, n); i++ {
					subs = append(subs, redisstore.Submit{Task: &task.Task{ID: pendingID(i), Type: "bench", Payload: payload, DueAt: due}})
				}
				res, err := w.store.Schedule(b.Context(), subs)
				if err != nil {
					failed.Add(int64(len(subs)))
					continue
				}
				for _, r := range res {
					if r.Err != nil {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Fatalf("%d pending tasks not scheduled", failed.Load())
	}
}
