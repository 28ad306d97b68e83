package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// BenchmarkPaced measures what a handled task costs a worker under
// moderate load, where records arrive a few at a time and its
// micro-batches are small and spread over the shards (BenchmarkThroughput
// drains a full topic, in micro-batches of tens of tasks per shard). For
// each rate, tasks fired ahead into Redis (16 shards) are written to the
// worker's topic at that rate (a paced kafka-go writer in this process),
// and one worker with a no-op handler (concurrency 16) runs them. It
// prints redis-server CPU per handled task (INFO cpu, from the first
// record written until every outcome is stored) and where redis-server's
// time went (INFO commandstats).
//
//	go test ./worker -run '^$' -bench BenchmarkPaced -benchtime 1x
func BenchmarkPaced(b *testing.B) {
	rates := []int{2000, 10000}
	const seconds = 3
	rds := testenv.StartRedis(b)
	rdb := rds.Client(b)
	var topics []string
	for _, r := range rates {
		topics = append(topics, "bench.stage"+strconv.Itoa(r), "bench.paced"+strconv.Itoa(r))
	}
	k := testenv.StartKafka(b, topics...)
	ns := fmt.Sprintf("p%d", rand.Uint32())
	store, err := redisstore.New(b.Context(), rdb, redisstore.Options{Namespace: ns, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	firer := &worktest.Firer{Store: store, Writer: worktest.NewWriter(b, k.Brokers)}
	writer := worktest.NewWriter(b, k.Brokers)
	writer.BatchTimeout = time.Millisecond

	// each rate stages and paces its own tasks once: one iteration
	if b.N > 1 {
		b.Fatal("BenchmarkPaced runs once: -benchtime 1x")
	}
	b.ResetTimer()
	for _, rate := range rates {
		n := rate * seconds
		// the tasks fired into Redis and staged on a topic of their own
		stage := "bench.stage" + strconv.Itoa(rate)
		tasks := make([]*task.Task, n)
		for i := range tasks {
			tasks[i] = &task.Task{ID: fmt.Sprintf("paced-%d-%d", rate, i), Type: "noop", Topic: stage,
				Payload: []byte(`{"order":12345}`), PayloadJSON: true}
		}
		staged := k.Collect(b, stage)
		worktest.Fire(b, firer, tasks...)
		testenv.WaitFor(b, time.Minute, "tasks staged", func() bool { return staged.Total() >= n })
		topic := "bench.paced" + strconv.Itoa(rate)
		msgs := make([]kafka.Message, 0, n)
		for _, r := range staged.All()[:n] {
			m := kafka.Message{Topic: topic, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
			}
			msgs = append(msgs, m)
		}
		// the firer staged them shard by shard; tasks due over time
		// arrive from every shard
		rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })

		cs0, cpu0 := testenv.CommandStats(b, rdb), testenv.RedisCPU(b, rdb)
		handled := pacedConsume(b, k.Brokers, rdb, ns, topic, msgs, rate, writer)
		redisUS := float64((testenv.RedisCPU(b, rdb) - cpu0).Nanoseconds()) / 1000 / float64(n)
		fmt.Printf("\npaced at %d tasks/s for %ds, one worker (concurrency 16, no-op handler), 16 shards: handled %d; redis-server %.2f us of CPU per task\n",
			rate, seconds, handled, redisUS)
		fmt.Printf("    redis-server per task, by command: %s\n", testenv.CommandStatsDelta(cs0, testenv.CommandStats(b, rdb), n))
		b.ReportMetric(redisUS, "redis-us/task@"+strconv.Itoa(rate))
	}
}

// pacedConsume runs one worker on topic while msgs are written to it at
// rate per second, until every one is handled and its outcome stored.
func pacedConsume(b *testing.B, brokers []string, rdb redisClient, ns, topic string, msgs []kafka.Message, rate int, wr *kafka.Writer) int {
	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{
		Brokers: brokers, Group: "work-" + topic, Topics: []string{topic}, Redis: rdb, Namespace: ns,
		Concurrency: 16, Registerer: reg, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	w.HandleDefault(func(context.Context, *worker.Task) error { return nil })
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	handled := func() int { return int(metricSum(b, reg, "delayq_work_handled_total", nil)) }
	// the writer keeps to the rate on average: each millisecond it writes
	// what the rate says is due by then
	start := time.Now()
	sent := 0
	tick := time.NewTicker(time.Millisecond)
	for sent < len(msgs) {
		<-tick.C
		due := min(len(msgs), int(time.Since(start).Seconds()*float64(rate))+1)
		if due > sent {
			if err := wr.WriteMessages(b.Context(), msgs[sent:due]...); err != nil {
				b.Fatal(err)
			}
			sent = due
		}
	}
	tick.Stop()
	testenv.WaitFor(b, time.Minute, "every paced task handled", func() bool { return handled() >= len(msgs) })
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return handled()
}
