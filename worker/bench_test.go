package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// BenchmarkThroughput compares, on one kfake broker and one redis-server in
// the same run, how fast one worker with a no-op handler drains N fired
// tasks (per micro-batch: one pipeline claiming and reading the tasks;
// outcomes stored in coalesced pipelines; claims released in batches)
// against how fast a bare kafka-go consumer-group Reader reads the
// same number of records (FetchMessage + CommitMessages, commits batched
// every 100ms by kafka-go), and how fast the least a worker with a
// done-marker can do goes (idealConsume). Each run uses its own topic and
// group, filled beforehand with N records of fired tasks; the raw Reader
// reads its topic again, with a fresh group, after each worker pass, and
// each pass is compared with the raw passes on either side of it and with
// the median of all of them. Each line says the CPU per record or task.
// Run it once:
//
//	go test ./worker -run '^$' -bench BenchmarkThroughput -benchtime 1x
//
// DQ_BENCH_TASKS sets N (default 20000); DQ_BENCH_MASTERS=k puts the
// store on a Redis Cluster of k masters instead of one redis-server
// (benchRedis).
func BenchmarkThroughput(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("DQ_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	ns := fmt.Sprintf("b%d", rand.Uint32())
	rs := startBenchRedis(b, ns, 16)
	rdb := rs.client
	concurrency := []int{16, 64, 256} // 16 is the default
	topics := []string{"bench.raw", "bench.ideal"}
	for _, c := range concurrency {
		topics = append(topics, "bench.c"+strconv.Itoa(c))
	}
	k := testenv.StartKafka(b, append(topics, "dq.dead")...)
	store, err := redisstore.New(b.Context(), rdb, redisstore.Options{Namespace: ns, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	firer := &worktest.Firer{Store: store, Writer: worktest.NewWriter(b, k.Brokers)}
	prep := time.Now()
	for _, topic := range topics {
		tasks := make([]*task.Task, n)
		for i := range tasks {
			tasks[i] = &task.Task{ID: topic + "-" + strconv.Itoa(i), Type: "noop", Topic: topic, Payload: []byte(`{"order":12345}`), PayloadJSON: true}
		}
		worktest.Fire(b, firer, tasks...)
	}
	b.Logf("prepared %d fired tasks on each of %v in %v", n, topics, time.Since(prep).Round(time.Millisecond))

	b.ResetTimer()
	for range b.N {
		// raw kafka-go is read before the first pass and again after each
		// worker pass (a fresh group each time, the same records): on a
		// small VM one raw pass varies by a quarter from the next, so each
		// worker pass is compared with the raw passes on either side of it
		// and with the run's median
		var raws []float64
		var rawCPUs []float64 // µs per record
		readRaw := func() {
			pcpu0 := testenv.ProcessCPU()
			raws = append(raws, rawConsume(b, k.Brokers, "bench.raw", "raw-"+strconv.Itoa(len(raws)), n))
			rawCPUs = append(rawCPUs, float64((testenv.ProcessCPU()-pcpu0).Nanoseconds())/1000/float64(n))
		}
		readRaw()
		fmt.Printf("\nThroughput, %d records per run, one kfake broker (4 partitions, in this process) + %s, GOMAXPROCS=%d\n",
			n, rs.what, runtime.GOMAXPROCS(0))
		fmt.Printf("  raw kafka-go Reader (group, FetchMessage + CommitMessages, CommitInterval 100ms): %8.0f msgs/s (%.2fus of CPU per record: kafka-go and kfake)\n", raws[0], rawCPUs[0])
		cpu0, pcpu0 := rs.cpu(b), testenv.ProcessCPU()
		ideal := idealConsume(b, k.Brokers, rdb, "bench.ideal", n)
		fmt.Printf("  ideal worker (the same Reader; per micro-batch one ZMSCORE done-check and one ZADD done-marker of <id>:<gen>, nothing else): %8.0f tasks/s = %3.0f%% of raw (CPU per task: redis-server %.2fus, this process %.2fus)\n",
			ideal, 100*ideal/raws[0], float64((rs.cpu(b)-cpu0).Nanoseconds())/1000/float64(n), float64((testenv.ProcessCPU()-pcpu0).Nanoseconds())/1000/float64(n))
		b.ReportMetric(ideal, "ideal_tasks/s")
		rates := map[int]float64{}
		for _, c := range concurrency {
			cs0 := rs.commandStats(b)
			nodes0, pcpu0, t0 := rs.nodeCPU(b), testenv.ProcessCPU(), time.Now()
			mb0, mt0 := testenv.CPUTimes()
			rate := workerConsume(b, k.Brokers, rdb, ns, "bench.c"+strconv.Itoa(c), n, c)
			wall := time.Since(t0).Seconds()
			var busy, busiest float64 // all masters' CPU, and the busiest one's share of its core
			for i, c := range rs.nodeCPU(b) {
				d := (c - nodes0[i]).Seconds() / wall
				busy += d
				busiest = max(busiest, d)
			}
			pbusy := (testenv.ProcessCPU() - pcpu0).Seconds() / wall
			mb1, mt1 := testenv.CPUTimes()
			mbusy := float64(mb1-mb0) / float64(max(mt1-mt0, 1))
			before := raws[len(raws)-1]
			readRaw()
			after := raws[len(raws)-1]
			fmt.Printf("  worker, no-op handler, concurrency %3d:                                          %8.0f tasks/s = %3.0f%%, %3.0f%% of the raw passes before and after it (%.0f, %.0f msgs/s) (redis-server CPU %3.0f%% of a core, busiest master %3.0f%%, worker+kfake process %3.0f%%, machine %3.0f%% of all %d cores)\n",
				c, rate, 100*rate/before, 100*rate/after, before, after, 100*busy, 100*busiest, 100*pbusy, 100*mbusy, runtime.NumCPU())
			// CPU per task = busy share x wall / n: what 50% of raw's
			// rate would cost in cores at this CPU per task
			taskCPU := (busy + pbusy) * wall / float64(n) * 1e6
			fmt.Printf("      CPU per task %.2fus (redis-server %.2f + worker and kfake %.2f); 50%% of raw (%.0f tasks/s) would need %.1f cores at that cost (this machine: %d)\n",
				taskCPU, busy*wall/float64(n)*1e6, pbusy*wall/float64(n)*1e6, before/2, before/2*taskCPU/1e6, runtime.NumCPU())
			fmt.Printf("      redis-server per task, by command (INFO commandstats; evalsha includes the commands its scripts call): %s\n",
				testenv.CommandStatsDelta(cs0, rs.commandStats(b), n))
			b.ReportMetric(rate, "c"+strconv.Itoa(c)+"_tasks/s")
			rates[c] = rate
		}
		med := testenv.Median(raws)
		fmt.Printf("  raw kafka-go, %d passes of this run: %s msgs/s (median %.0f, CPU per record %s us)\n", len(raws), testenv.JoinFloats(raws, 0), med, testenv.JoinFloats(rawCPUs, 2))
		for _, c := range concurrency {
			fmt.Printf("  share of the median raw pass, concurrency %3d: %3.0f%%\n", c, 100*rates[c]/med)
		}
		b.ReportMetric(med, "raw_msgs/s")
	}
}

// benchRedis is BenchmarkThroughput's task store: one redis-server, or
// with DQ_BENCH_MASTERS=k a Redis Cluster of k masters whose slots are
// split so that each serves as many of the namespace's shards. On a
// machine with cores to spare, the cluster shows what one work process
// does when one redis-server's core is not its bound.
type benchRedis struct {
	what   string
	client redis.UniversalClient
	nodes  []*redis.Client // every redis-server, each read alone for INFO
}

func startBenchRedis(b *testing.B, ns string, shards int) benchRedis {
	k, _ := strconv.Atoi(os.Getenv("DQ_BENCH_MASTERS"))
	if k <= 0 {
		r := testenv.StartRedis(b)
		c := r.Client(b)
		return benchRedis{what: "one redis-server", client: c, nodes: []*redis.Client{c}}
	}
	tags := make([]string, shards)
	for s := range tags {
		tags[s] = "{" + ns + ":" + strconv.Itoa(s) + "}"
	}
	cl := testenv.StartRedisClusterRanges(b, testenv.KeySlotRanges(k, tags))
	rs := benchRedis{what: fmt.Sprintf("a Redis Cluster of %d masters (%d shards)", k, shards), client: cl.Client(b)}
	for _, n := range cl.Nodes {
		rs.nodes = append(rs.nodes, n.Client(b))
	}
	return rs
}

// nodeCPU is each redis-server's CPU time so far (testenv.RedisCPU).
func (r benchRedis) nodeCPU(b *testing.B) []time.Duration {
	out := make([]time.Duration, len(r.nodes))
	for i, n := range r.nodes {
		out[i] = testenv.RedisCPU(b, n)
	}
	return out
}

// cpu is the CPU time of all the redis-servers together.
func (r benchRedis) cpu(b *testing.B) time.Duration {
	var sum time.Duration
	for _, c := range r.nodeCPU(b) {
		sum += c
	}
	return sum
}

// commandStats is INFO commandstats summed over the redis-servers.
func (r benchRedis) commandStats(b *testing.B) map[string]testenv.CommandStat {
	out := map[string]testenv.CommandStat{}
	for _, n := range r.nodes {
		for name, s := range testenv.CommandStats(b, n) {
			t := out[name]
			t.Calls += s.Calls
			t.Usec += s.Usec
			out[name] = t
		}
	}
	return out
}

// benchReader is the bare kafka-go group Reader of the raw and ideal
// passes: commits batched every 100ms by kafka-go, from the first offset.
func benchReader(brokers []string, group, topic string) *kafka.Reader {
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, GroupID: group, GroupTopics: []string{topic},
		MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 500 * time.Millisecond,
		CommitInterval: 100 * time.Millisecond, StartOffset: kafka.FirstOffset,
		HeartbeatInterval: time.Second, SessionTimeout: 10 * time.Second,
	})
}

// rawConsume reads n records of topic with a fresh consumer group (named
// group) and reports records per second (from reader creation to the n-th
// record).
func rawConsume(b *testing.B, brokers []string, topic, group string, n int) float64 {
	r := benchReader(brokers, group, topic)
	defer r.Close()
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	for i := range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("raw fetch %d: %v", i, err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			b.Fatalf("raw commit: %v", err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// idealConsume is the least a worker that keeps issue #4's promise (a
// done-marker per task id and generation, so that a redelivered record is
// not run again) can do: the raw Reader, micro-batches of what FetchMessage
// returns within a millisecond (at most 512), one ZMSCORE of the batch's
// "<id>:<gen>" on one done set before the no-op handlers and one ZADD
// after, then the commit. No claim against a concurrent run, no generation
// check against the record, no outcome other than success, one Redis key
// instead of one per shard: an upper bound for any design, not a worker.
// It returns tasks per second (from reader creation to the n-th commit).
func idealConsume(b *testing.B, brokers []string, rdb redis.UniversalClient, topic string, n int) float64 {
	r := benchReader(brokers, "ideal-"+topic, topic)
	defer r.Close()
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	doneKey := "bench:ideal:done:" + strconv.Itoa(int(rand.Uint32()))
	start := time.Now()
	batch := make([]kafka.Message, 0, 512)
	members := make([]string, 0, 512)
	zs := make([]redis.Z, 0, 512)
	for got := 0; got < n; {
		batch, members, zs = batch[:0], members[:0], zs[:0]
		m, err := r.FetchMessage(ctx)
		if err != nil {
			b.Fatalf("ideal fetch %d: %v", got, err)
		}
		batch = append(batch, m)
		fctx, fcancel := context.WithTimeout(ctx, time.Millisecond)
		for len(batch) < cap(batch) && got+len(batch) < n {
			m, err := r.FetchMessage(fctx)
			if err != nil {
				break
			}
			batch = append(batch, m)
		}
		fcancel()
		for _, m := range batch {
			var id, gen string
			for _, h := range m.Headers {
				switch h.Key {
				case worker.HeaderID:
					id = string(h.Value)
				case worker.HeaderGen:
					gen = string(h.Value)
				}
			}
			members = append(members, id+":"+gen)
		}
		seen, err := rdb.ZMScore(ctx, doneKey, members...).Result()
		if err != nil {
			b.Fatalf("ideal done-check: %v", err)
		}
		expiry := float64(time.Now().Add(24 * time.Hour).UnixMilli())
		for i, mem := range members {
			if seen[i] == 0 { // not done yet: the no-op handler runs
				zs = append(zs, redis.Z{Score: expiry, Member: mem})
			}
		}
		if len(zs) > 0 {
			if err := rdb.ZAdd(ctx, doneKey, zs...).Err(); err != nil {
				b.Fatalf("ideal done-marker: %v", err)
			}
		}
		if err := r.CommitMessages(ctx, batch...); err != nil {
			b.Fatalf("ideal commit: %v", err)
		}
		got += len(batch)
	}
	return float64(n) / time.Since(start).Seconds()
}

// workerConsume runs one worker with a no-op handler on topic until it has
// handled n tasks and reports tasks per second (from Run to the n-th).
func workerConsume(b *testing.B, brokers []string, rdb redis.UniversalClient, ns, topic string, n, conc int) float64 {
	return workerConsumeWith(b, brokers, rdb, ns, topic, n, conc, nil)
}

// workerConsumeWith is workerConsume with a Limiter in the worker's
// Config (nil: none).
func workerConsumeWith(b *testing.B, brokers []string, rdb redis.UniversalClient, ns, topic string, n, conc int, lim worker.Limiter) float64 {
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	done := 0
	var first time.Time
	all := make(chan struct{})
	w, err := worker.New(worker.Config{
		Brokers: brokers, Group: "work-" + topic, Topics: []string{topic}, Redis: rdb, Namespace: ns,
		Concurrency: conc, Registerer: reg, Logger: slog.New(slog.DiscardHandler), Limiter: lim,
	})
	if err != nil {
		b.Fatal(err)
	}
	w.HandleDefault(func(ctx context.Context, t *worker.Task) error {
		mu.Lock()
		if done == 0 {
			first = time.Now()
		}
		if done++; done == n {
			close(all)
		}
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(b.Context())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- w.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("worker on %s: %d of %d handled after 2m", topic, done, n)
	}
	// the last outcomes reach Redis right after their handlers return
	testenv.WaitFor(b, 30*time.Second, "outcomes stored", func() bool {
		return metricSum(b, reg, "delayq_work_handled_total", nil) >= float64(n)
	})
	rate := float64(n) / time.Since(start).Seconds()
	mu.Lock()
	fmt.Printf("    (%s: first task handled %v after Run; the rest at %.0f tasks/s)\n", topic,
		first.Sub(start).Round(time.Millisecond), float64(n-1)/time.Since(first).Seconds())
	mu.Unlock()
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return rate
}
