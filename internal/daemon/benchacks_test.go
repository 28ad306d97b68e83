package daemon

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkReplicaAcks is DQ_REDIS_REPLICA_ACKS 0 and 1 side by side, on
// one primary with one replica (both redis-server children on this
// machine, loopback: the replica's round trip is what WAIT adds):
//
//	go test -run '^$' -bench BenchmarkReplicaAcks -benchtime 3s -count 3 ./internal/daemon/
//
// The two daemons run in the same process and write to the same primary;
// acks=0 and acks=1 of a shape run one after the other (with -count, each
// sub-benchmark's runs come in a row: compare the spreads). batch: tasks/s through the batch API (1000 tasks a
// request, 4 senders); single16: tasks/s and the request latency (p50,
// p99: what a producer waits for its acknowledgement) of one-task
// requests from 16 clients.
func BenchmarkReplicaAcks(b *testing.B) {
	primary, replica := testenv.StartRedis(b), testenv.StartRedis(b)
	testenv.ReplicaOf(b, replica, primary)
	rdb := primary.Client(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	b.Cleanup(hc.CloseIdleConnections)
	apps := map[int]*testApp{}
	for _, acks := range []int{0, 1} {
		cfg := testConfig(b, primary.Addr)
		cfg.MaxBody = 4 << 20
		cfg.RedisReplicaAcks, cfg.RedisAckTimeout = acks, 500*time.Millisecond
		apps[acks] = startBenchApp(b, cfg)
	}
	for _, shape := range []string{"batch", "single16"} {
		for _, acks := range []int{0, 1} {
			app := apps[acks]
			b.Run(fmt.Sprintf("%s/acks=%d", shape, acks), func(b *testing.B) {
				switch shape {
				case "batch":
					const size, senders = 1000, 4
					describe(b, "POST /v1/tasks/batch of %d tasks (UUID ids, 64-byte payload, delay 1h), %d senders; DQ_REDIS_REPLICA_ACKS=%d, one replica on loopback", size, senders, acks)
					bodies := make([][]byte, b.N)
					for i := range bodies {
						bodies[i] = batchBody(size)
					}
					b.ResetTimer()
					done := measure(b, rdb, b.N*size)
					run(b, senders, b.N, func(i int) { post(b, hc, app.base+"/v1/tasks/batch", bodies[i], http.StatusOK) })
					done()
				case "single16":
					const clients = 16
					describe(b, "POST /v1/tasks, one task a request, %d clients with keep-alive; DQ_REDIS_REPLICA_ACKS=%d, one replica on loopback; ack-p50/p99: the request's round trip", clients, acks)
					bodies := make([][]byte, b.N)
					for i := range bodies {
						bodies[i] = taskBody()
					}
					lat := make([]time.Duration, b.N)
					var mu sync.Mutex
					b.ResetTimer()
					done := measure(b, rdb, b.N)
					run(b, clients, b.N, func(i int) {
						start := time.Now()
						post(b, hc, app.base+"/v1/tasks", bodies[i], http.StatusCreated)
						d := time.Since(start)
						mu.Lock()
						lat[i] = d
						mu.Unlock()
					})
					done()
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ack-p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ack-p99-ms")
				}
			})
		}
	}
}
