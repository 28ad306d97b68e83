package outcome_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkPublish: what publishing an outcome costs the process at a
// steady rate, by kafka-go batch size (issue 46: the outcome writer's
// partition batches were the largest share of a work process' bytes).
// 40,000 records published at 10,000/s (bench-scale's rate per work
// process) to an in-process kfake broker (8 partitions; its CPU is in the
// figure, alike for every size), each size three times, alternated. Per
// record: the process' CPU (getrusage) and the bytes it allocated
// (runtime.MemStats.TotalAlloc) from the first Publish until the last
// record was confirmed.
//
//	go test ./internal/outcome -run '^$' -bench BenchmarkPublish -benchtime 1x
func BenchmarkPublish(b *testing.B) {
	const n, rate, rounds = 40000, 10000, 3
	sizes := []int{500, outcome.DefaultBatchSize}
	for range b.N {
		var topics []string
		for r := range rounds {
			for _, size := range sizes {
				topics = append(topics, fmt.Sprintf("outcomes.bench.%d.%d", size, r))
			}
		}
		k := testenv.StartKafkaPartitions(b, 8, topics...)
		fmt.Printf("BenchmarkPublish: %d outcome records at %d/s to kfake (8 partitions), per record: CPU of this process (getrusage, broker included) and bytes allocated, by kafka-go BatchSize\n", n, rate)
		cpu := map[int][]float64{}
		for r := range rounds {
			for j, size := range sizes {
				topic := topics[r*len(sizes)+j]
				p, reg := newPub(b, outcome.Config{Brokers: k.Brokers, Topic: topic, BatchSize: size, Queue: n})
				if !p.Publish(rec(0, "succeeded")) { // the topic made and the connection up
					b.Fatal("warm-up record dropped")
				}
				testenv.WaitFor(b, 30*time.Second, "the warm-up record", func() bool { return published(reg, "succeeded") == 1 })
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				c0, t0 := testenv.ProcessCPU(), time.Now()
				tick := time.NewTicker(time.Millisecond)
				for i := 0; i < n; {
					<-tick.C
					due := min(n, int(time.Since(t0).Seconds()*rate)+1)
					for ; i < due; i++ {
						if !p.Publish(rec(i, "succeeded")) {
							b.Fatalf("record %d dropped", i)
						}
					}
				}
				tick.Stop()
				testenv.WaitFor(b, 30*time.Second, "every record confirmed", func() bool { return published(reg, "succeeded") == n+1 })
				c1 := testenv.ProcessCPU()
				runtime.ReadMemStats(&ms1)
				us := float64((c1 - c0).Nanoseconds()) / 1000 / n
				cpu[size] = append(cpu[size], us)
				fmt.Printf("  round %d, BatchSize %3d: %.2f µs CPU, %.0f bytes allocated per record\n", r+1, size, us, float64(ms1.TotalAlloc-ms0.TotalAlloc)/n)
				b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, fmt.Sprintf("B/record-batch%d", size))
			}
		}
		for _, size := range sizes {
			b.ReportMetric(median(cpu[size]), fmt.Sprintf("us/record-batch%d", size))
		}
	}
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
