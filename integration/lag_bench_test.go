package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/event"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkLag measures firing lag where a user sees it (issue #22): at an
// independent franz-go consumer, with the real binaries on this machine.
//
// Set-up, once: redis-server (AOF, appendfsync always, as recommended),
// embedded etcd and kfake (in this process), one daemon and two event
// processes (the binaries built from this tree, DQ_SHARDS=16, every other
// setting at its default), topics of 8 partitions created up front. A
// warm-up of 2,000 tasks over 1s is fired and read first.
//
// Each run: 20,000 tasks due over 5s (4 per millisecond, 4,000 tasks/s)
// are scheduled ahead through the daemon's batch API (batches of 1,000, 4
// at a time), on a topic of the run's own; a franz-go consumer (FetchMaxWait
// 10ms, franz-go's minimum; FetchMinBytes 1: kfake answers a fetch as soon as
// a record is appended, so the wait adds nothing) started before the first due time records, per
// record, dq-due-at, dq-fired-at, the record timestamp and the local time
// PollFetches returned it. Printed per run, p50/p99/p99.9/max:
//
//	take       due -> dq-fired-at (the poller's wake-up and its take)
//	produce    dq-fired-at -> record timestamp (0 by construction: the
//	           record's CreateTime is the fire time; the produce call's
//	           duration is the event processes' delayq_produce_duration_seconds,
//	           printed from their /metrics)
//	transit    record timestamp -> consumer (produce request, broker, fetch)
//	total      due -> consumer
//
// then, in the same run right after, a raw baseline: a plain kafka-go Writer
// with the event process's producer settings (fire/kafka.go newWriter)
// writes 20,000 records over 5s in the same pattern (each millisecond, 4
// synchronous one-record writes in parallel, like 4 pollers' takes) to a
// topic of its own, read by the same consumer: record timestamp (set at the
// call) -> consumer, so kfake's own transit is visible.
//
// Run: go test ./integration -run '^$' -bench BenchmarkLag -benchtime 1x -count 1 -timeout 20m
//
// DQ_BENCH_RUNS (default 5), DQ_BENCH_EVENTS (event processes, default 2),
// DQ_BENCH_BATCH_TIMEOUT (the event processes' DQ_KAFKA_BATCH_TIMEOUT and
// the raw writer's BatchTimeout; default: the event binary's default),
// DQ_BENCH_GCTRACE=1 (GODEBUG=gctrace=1 in the event processes; their GC
// cycles during each run are summarised), DQ_BENCH_EVENT_ENV ("K=V,K=V":
// more environment for the event processes, e.g. GOGC=400), DQ_BENCH_AOF=0
// (redis-server without persistence: what appendfsync always costs).
func BenchmarkLag(b *testing.B) {
	runs := benchEnvInt(b, "DQ_BENCH_RUNS", 5)
	events := benchEnvInt(b, "DQ_BENCH_EVENTS", 2)
	batchTimeout := event.DefaultConfig().KafkaBatchWait
	if v := os.Getenv("DQ_BENCH_BATCH_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("DQ_BENCH_BATCH_TIMEOUT: %v", err)
		}
		batchTimeout = d
	}
	evEnv := map[string]string{"DQ_KAFKA_BATCH_TIMEOUT": batchTimeout.String()}
	gctrace := os.Getenv("DQ_BENCH_GCTRACE") == "1"
	if gctrace {
		evEnv["GODEBUG"] = "gctrace=1"
	}
	if v := os.Getenv("DQ_BENCH_EVENT_ENV"); v != "" {
		for kv := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				b.Fatalf("DQ_BENCH_EVENT_ENV: %q is not K=V", kv)
			}
			evEnv[k] = val
		}
	}

	topics := []string{"bench.lag.warm", "bench.raw.warm"}
	for r := range runs {
		topics = append(topics, lagTopic(r), rawTopic(r))
	}
	aof := os.Getenv("DQ_BENCH_AOF") != "0"
	c, procStart := startLagCluster(b, events, evEnv, topics, aof)
	api := client.New(c.DaemonURL(0), client.WithHTTPClient(&http.Client{Timeout: 60 * time.Second}))
	waitLedTB(b, c, events, 30*time.Second)

	say := func(f string, args ...any) { fmt.Fprintf(os.Stderr, "BenchmarkLag: "+f+"\n", args...) }
	load, _ := os.ReadFile("/proc/loadavg")
	say("machine: %d CPUs, load average %s; %d event process(es) %v, 1 daemon, redis-server (AOF with appendfsync always: %v), embedded etcd, kfake and the consumer in this process; 16 shards, topics of 8 partitions",
		runtime.NumCPU(), strings.TrimSpace(string(load)), events, evEnv, aof)
	say("consumer: franz-go, FetchMaxWait 10ms (franz-go's minimum), FetchMinBytes 1; raw writer: kafka-go, BatchSize 500, BatchTimeout %v, RequireAll, Hash balancer", batchTimeout)

	w := newRawWriter(c.Brokers(), batchTimeout)
	defer w.close()

	// warm-up (not counted): connections, metadata, the leaders' first takes
	lagRun(b, c, api, w, "bench.lag.warm", "bench.raw.warm", 2000, time.Second, "warm")

	var all []lagResult
	for r := range runs {
		load, _ := os.ReadFile("/proc/loadavg")
		say("run %d: load average before %s", r+1, strings.TrimSpace(string(load)))
		h0 := scrapeHists(b, c, events)
		res := lagRun(b, c, api, w, lagTopic(r), rawTopic(r), 20000, 5*time.Second, strconv.Itoa(r))
		h1 := scrapeHists(b, c, events)
		res.print(say, r+1)
		say("run %d: redis-server in the fire window: %s", r+1, res.redis)
		for _, name := range []string{"delayq_fire_lag_seconds", "delayq_produce_duration_seconds"} {
			say("run %d: %s (Prometheus, all event processes, this run): %s", r+1, name, h1[name].Minus(h0[name]).Summary())
		}
		if gctrace {
			for i := range events {
				say("run %d: event %d GC: %s", r+1, i, gcSummary(c.inst[Event][i].out.Tail(64<<10), procStart[i], res.from, res.to))
			}
		}
		all = append(all, res)
	}
	summarize(say, all)
	if len(all) > 0 {
		var p99s []float64
		for _, r := range all {
			p99s = append(p99s, ms(testenv.Quantile(r.total, 0.99)))
		}
		slices.Sort(p99s)
		b.ReportMetric(p99s[len(p99s)/2], "median-p99-total-ms")
	}
}

func lagTopic(r int) string { return "bench.lag." + strconv.Itoa(r) }
func rawTopic(r int) string { return "bench.raw." + strconv.Itoa(r) }

func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: a positive integer", name, v)
	}
	return n
}

// startLagCluster is localProvisioner.Start for a benchmark (which has no
// *testing.T to give it): plain mode, redis-server with AOF as aof says,
// one daemon and events event processes (eventEnv added to theirs), no
// work process, DQ_SHARDS=16 (the production default), topics created
// with 8 partitions before any process starts (kafka-go's writer caches
// metadata). It returns when every process is healthy, with the times the
// event processes were started (for their gctrace clocks).
func startLagCluster(b *testing.B, events int, eventEnv map[string]string, topics []string, aof bool) (*localCluster, []time.Time) {
	b.Helper()
	bins, errs := buildLocal()
	for _, r := range []Role{Daemon, Event} {
		if errs[r] != nil {
			b.Fatalf("build %s: %v", r, errs[r])
		}
	}
	c := &localCluster{
		ns:     uniqueName("lag"),
		inst:   map[Role][]*localInstance{},
		hc:     &http.Client{Timeout: 2 * time.Second, Transport: trusting()},
		scheme: "http",
	}
	c.redis = testenv.StartRedis(b, testenv.RedisOptions{AOF: aof})
	c.etcd = testenv.StartEtcd(b)
	c.kafka = testenv.StartKafkaPartitions(b, 8, append([]string{"dq.tasks", "dq.dead", "dq.outcomes"}, topics...)...)
	env := merge(baseEnv(c.ns), map[string]string{
		"DQ_REDIS_ADDRS":    c.redis.Addr,
		"DQ_ETCD_ENDPOINTS": strings.Join(c.etcd.Endpoints, ","),
		"DQ_KAFKA_BROKERS":  strings.Join(c.kafka.Brokers, ","),
		"DQ_SHARDS":         "16",
		"DQ_SESSION_TTL":    "3s", // the default (baseEnv's 2s is for failover tests)
		"DQ_LOG_LEVEL":      "warn",
	})
	c.shards = 16
	b.Cleanup(func() {
		for _, r := range []Role{Daemon, Event} {
			for _, in := range c.inst[r] {
				in.kill()
				if b.Failed() {
					b.Logf("--- %s %d (%s) output tail ---\n%s", r, in.i, in.addr, in.out.Tail(6000))
				}
			}
		}
	})
	add := func(r Role, i int, extra map[string]string) *localInstance {
		in := &localInstance{role: r, i: i, path: bins[r], out: new(tailBuffer)}
		in.addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
		ienv := merge(env, extra, map[string]string{"DQ_HTTP_ADDR": in.addr})
		if r == Daemon {
			ienv["DQ_JOURNAL_DIR"] = b.TempDir()
		}
		for k, v := range ienv {
			in.env = append(in.env, k+"="+v)
		}
		sort.Strings(in.env)
		c.inst[r] = append(c.inst[r], in)
		return in
	}
	if err := c.startInstance(add(Daemon, 0, nil)); err != nil {
		b.Fatal(err)
	}
	starts := make([]time.Time, events)
	for i := range events {
		in := add(Event, i, eventEnv)
		starts[i] = time.Now()
		if err := c.startInstance(in); err != nil {
			b.Fatal(err)
		}
	}
	return c, starts
}

// waitLedTB waits until the event processes together lead every shard,
// each at least one (waitBalanced for a benchmark).
func waitLedTB(b *testing.B, c *localCluster, events int, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		led := shardsLed(c.hc, c, events)
		sum, each := 0, true
		for _, n := range led {
			sum += n
			each = each && n >= 1
		}
		if sum == c.shards && each {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("event processes lead %v of %d shards after %v", led, c.shards, timeout)
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a bounded wait
	}
}

// lagResult is one run's measurements, each in the order records came.
type lagResult struct {
	n                      int
	scheduled, slack       time.Duration // scheduling took; left before the first due time
	take, produce, transit []time.Duration
	total                  []time.Duration
	raw                    []time.Duration // raw writer: record timestamp -> consumer
	early, dups, rawDups   int
	from, to               time.Time // the fire window (first due, last due + 1s)
	lastConsumed           time.Duration
	redis                  string // commands and CPU of redis-server in the fire window
}

// lagRun schedules n tasks due over span on topic, consumes them, then
// writes n raw records over span to raw and consumes those.
func lagRun(b *testing.B, c *localCluster, api *client.Client, w *rawWriter, topic, raw string, n int, span time.Duration, tag string) lagResult {
	b.Helper()
	ctx := b.Context()
	cons := startLagConsumer(b, c, topic, raw)
	defer cons.stop()

	const lead = 6 * time.Second // scheduling 20,000 tasks takes ~1-3s here
	start := time.Now().Add(lead).Truncate(time.Millisecond)
	payload := []byte(`"` + strings.Repeat("x", 98) + `"`)
	tasks := make([]client.Task, n)
	step := span / time.Duration(n)
	for i := range tasks {
		tasks[i] = client.Task{
			ID: "lag-" + tag + "-" + strconv.Itoa(i), Type: "bench", Payload: payload, Topic: topic,
			DueAt: start.Add(time.Duration(i) * step),
		}
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	sem := make(chan struct{}, 4)
	for i := 0; i < n; i += 1000 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := api.ScheduleBatch(ctx, tasks[i:min(i+1000, n)])
			if err != nil {
				failed.Add(1)
				b.Errorf("schedule batch at %d: %v", i, err)
				return
			}
			for _, r := range res {
				if r.Err != nil || r.State != "scheduled" {
					failed.Add(1)
					b.Errorf("task %s: state %q, %v", r.ID, r.State, r.Err)
					return
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.FailNow()
	}
	res := lagResult{n: n, scheduled: time.Since(t0), slack: time.Until(start), from: start, to: start.Add(span + time.Second)}
	if res.slack < 500*time.Millisecond {
		b.Fatalf("scheduling took %v: only %v left before the first due time", res.scheduled, res.slack)
	}

	// fired records
	rdb := c.redis.Client(b)
	var s0 map[string]testenv.CommandStat
	var cpu0 time.Duration
	redisAt := time.AfterFunc(time.Until(start.Add(-100*time.Millisecond)), func() {
		s0, cpu0 = redisCommands(b, rdb)
	})
	var redisDone sync.WaitGroup
	redisDone.Add(1)
	time.AfterFunc(time.Until(res.to), func() {
		defer redisDone.Done()
		s1, cpu1 := redisCommands(b, rdb)
		cpu := cpu1 - cpu0
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(s1)) {
			if d := s1[name].Calls - s0[name].Calls; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %d calls %.1fus/call", name, d, float64(s1[name].Usec-s0[name].Usec)/float64(d)))
			}
		}
		res.redis = fmt.Sprintf("CPU %v (%.0f%% of one core over %v); %s", cpu.Round(time.Millisecond),
			100*cpu.Seconds()/res.to.Sub(start.Add(-100*time.Millisecond)).Seconds(), res.to.Sub(start).Round(time.Millisecond), strings.Join(parts, ", "))
	})
	defer redisAt.Stop()
	seen := make(map[string]bool, n)
	deadline := start.Add(span + 30*time.Second)
	for len(seen) < n {
		if time.Now().After(deadline) {
			b.Fatalf("run %s: %d of %d fired records consumed by %v after the last due time", tag, len(seen), n, 30*time.Second)
		}
		for _, rec := range cons.next(ctx, time.Second) {
			if rec.R.Topic != topic {
				continue
			}
			id := header(rec.R, record.HeaderID)
			if seen[id] {
				res.dups++
				continue
			}
			seen[id] = true
			due, ok1 := headerMillis(rec.R, record.HeaderDueAt)
			fired, ok2 := headerMillis(rec.R, record.HeaderFiredAt)
			if !ok1 || !ok2 {
				b.Fatalf("record of %s without %s/%s", id, record.HeaderDueAt, record.HeaderFiredAt)
			}
			if fired.Before(due) {
				res.early++
			}
			res.take = append(res.take, fired.Sub(due))
			res.produce = append(res.produce, rec.R.Timestamp.Sub(fired))
			res.transit = append(res.transit, rec.At.Sub(rec.R.Timestamp))
			res.total = append(res.total, rec.At.Sub(due))
			res.lastConsumed = rec.At.Sub(start)
		}
	}

	redisDone.Wait()

	// raw baseline: same pattern, plain kafka-go writer
	rawStart := time.Now().Add(200 * time.Millisecond)
	var rawFailed atomic.Int64
	var rwg sync.WaitGroup
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for sent < n {
		now := <-tick.C
		due := min(n, int(now.Sub(rawStart)/step)+1)
		for ; sent < due; sent++ {
			key := []byte("raw-" + tag + "-" + strconv.Itoa(sent))
			rwg.Go(func() {
				m := kafka.Message{Topic: raw, Key: key, Value: payload, Time: time.Now()}
				if err := w.w.WriteMessages(ctx, m); err != nil {
					rawFailed.Add(1)
				}
			})
		}
	}
	tick.Stop()
	rwg.Wait()
	if rawFailed.Load() > 0 {
		b.Fatalf("raw writer: %d writes failed", rawFailed.Load())
	}
	rawSeen := make(map[string]bool, n)
	deadline = time.Now().Add(30 * time.Second)
	for len(rawSeen) < n {
		if time.Now().After(deadline) {
			b.Fatalf("run %s: %d of %d raw records consumed", tag, len(rawSeen), n)
		}
		for _, rec := range cons.next(ctx, time.Second) {
			if rec.R.Topic != raw {
				continue
			}
			k := string(rec.R.Key)
			if rawSeen[k] {
				res.rawDups++
				continue
			}
			rawSeen[k] = true
			res.raw = append(res.raw, rec.At.Sub(rec.R.Timestamp))
		}
	}
	return res
}

// rawWriter is a plain kafka-go Writer with the settings of the event
// process's producer (fire/kafka.go newWriter; DQ_FIRE_BATCH 500,
// DQ_KAFKA_WRITE_TIMEOUT 5s, metadata TTL 10s).
type rawWriter struct {
	w  *kafka.Writer
	tr *kafka.Transport
}

func newRawWriter(brokers []string, batchTimeout time.Duration) *rawWriter {
	tr := &kafka.Transport{ClientID: "delayq-bench-raw", MetadataTTL: 10 * time.Second, DialTimeout: 5 * time.Second}
	return &rawWriter{tr: tr, w: &kafka.Writer{
		Addr:            kafka.TCP(brokers...),
		Balancer:        &kafka.Hash{},
		MaxAttempts:     3,
		WriteBackoffMin: 50 * time.Millisecond,
		WriteBackoffMax: 500 * time.Millisecond,
		BatchSize:       500,
		BatchTimeout:    batchTimeout,
		ReadTimeout:     5 * time.Second,
		WriteTimeout:    5 * time.Second,
		RequiredAcks:    kafka.RequireAll,
		Transport:       tr,
	}}
}

func (w *rawWriter) close() {
	_ = w.w.Close()
	w.tr.CloseIdleConnections()
}

// lagConsumer reads the fired and the raw topics with an independent
// franz-go client, stamping each fetch as it returns (testenv.StampPolls).
type lagConsumer struct {
	cl    *kgo.Client
	polls *testenv.Polls
}

func startLagConsumer(b *testing.B, c *localCluster, topics ...string) *lagConsumer {
	b.Helper()
	cl, err := kgo.NewClient(append(c.KafkaOpts(),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond), // franz-go's minimum
		kgo.FetchMinBytes(1),
	)...)
	if err != nil {
		b.Fatal(err)
	}
	return &lagConsumer{cl: cl, polls: testenv.StampPolls(cl)}
}

// next returns the next fetch's records, or nil after wait.
func (lc *lagConsumer) next(ctx context.Context, wait time.Duration) []testenv.Stamped {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case recs := <-lc.polls.C:
		return recs
	case <-t.C:
		return nil
	case <-ctx.Done():
		return nil
	}
}

func (lc *lagConsumer) stop() {
	lc.polls.Stop()
	lc.cl.Close()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (r lagResult) print(say func(string, ...any), run int) {
	say("run %d: %d tasks scheduled in %v (%v left before the first due time); consumed %d, duplicates %d, fired early %d; last consumed %v after the first due time",
		run, r.n, r.scheduled.Round(time.Millisecond), r.slack.Round(time.Millisecond), len(r.total), r.dups, r.early, r.lastConsumed.Round(time.Millisecond))
	say("run %d: take     due -> fired-at            %s", run, testenv.LagDist(r.take))
	say("run %d: produce  fired-at -> record ts      %s", run, testenv.LagDist(r.produce))
	say("run %d: transit  record ts -> consumer      %s", run, testenv.LagDist(r.transit))
	say("run %d: TOTAL    due -> consumer            %s", run, testenv.LagDist(r.total))
	say("run %d: raw      kafka-go record ts -> consumer %s (duplicates %d)", run, testenv.LagDist(r.raw), r.rawDups)
	var over15 int
	for _, d := range r.total {
		if d > 15*time.Millisecond {
			over15++
		}
	}
	say("run %d: total over 15ms: %d (%.2f%%)", run, over15, 100*float64(over15)/float64(max(1, len(r.total))))
}

func summarize(say func(string, ...any), all []lagResult) {
	parts := []struct {
		name string
		get  func(lagResult) []time.Duration
	}{
		{"take", func(r lagResult) []time.Duration { return r.take }},
		{"transit", func(r lagResult) []time.Duration { return r.transit }},
		{"TOTAL", func(r lagResult) []time.Duration { return r.total }},
		{"raw", func(r lagResult) []time.Duration { return r.raw }},
	}
	for _, p := range parts {
		var cols [4][]float64
		for _, r := range all {
			for j, q := range []float64{0.5, 0.99, 0.999, 1} {
				cols[j] = append(cols[j], ms(testenv.Quantile(p.get(r), q)))
			}
		}
		var out []string
		for j, name := range []string{"p50", "p99", "p99.9", "max"} {
			out = append(out, fmt.Sprintf("%s %.1f..%.1f", name, slices.Min(cols[j]), slices.Max(cols[j])))
		}
		say("spread over %d runs, %-8s %s ms", len(all), p.name, strings.Join(out, "  "))
	}
}

// scrapeHists reads the histograms of every event process, summed.
func scrapeHists(b *testing.B, c *localCluster, events int) map[string]testenv.Hist {
	b.Helper()
	out := map[string]testenv.Hist{}
	for i := range events {
		resp, err := c.hc.Get(c.AdminURL(Event, i) + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if err := testenv.AddHists(out, string(body)); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

var gcLine = regexp.MustCompile(`gc \d+ @([0-9.]+)s \d+%: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock`)

// gcSummary sums the gctrace lines of a process whose @time falls within
// [from, to]: cycles, stop-the-world pauses (sweep termination + mark
// termination) and concurrent mark time.
func gcSummary(out string, procStart, from, to time.Time) string {
	var n int
	var stw, maxSTW, mark float64
	for line := range strings.SplitSeq(out, "\n") {
		m := gcLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		t := procStart.Add(time.Duration(at * float64(time.Second)))
		if t.Before(from) || t.After(to) {
			continue
		}
		a, _ := strconv.ParseFloat(m[2], 64)
		mk, _ := strconv.ParseFloat(m[3], 64)
		c, _ := strconv.ParseFloat(m[4], 64)
		n++
		stw += a + c
		maxSTW = max(maxSTW, a, c)
		mark += mk
	}
	return fmt.Sprintf("%d cycles in the fire window, stop-the-world %.2fms in all (longest %.3fms), concurrent mark %.1fms in all", n, stw, maxSTW, mark)
}

// redisCommands reads INFO commandstats and cpu: calls and microseconds
// per command, and redis-server's CPU time so far. It runs off the
// benchmark's goroutine, so it reports errors with Error only.
func redisCommands(b *testing.B, rdb interface {
	Info(context.Context, ...string) *redis.StringCmd
}) (stats map[string]testenv.CommandStat, cpu time.Duration) {
	info, err := rdb.Info(context.WithoutCancel(b.Context()), "commandstats", "cpu").Result()
	if err != nil {
		b.Error(err)
		return nil, 0
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				cpu += time.Duration(f * float64(time.Second))
			}
		}
	}
	return testenv.ParseCommandStats(info), cpu
}
