package work

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/worker"
)

// BenchmarkWebhookClients: the CPU a webhook call costs this process with
// each client (issue 46): 40,000 calls of Webhook.Handle from 16
// goroutines to an in-process sink answering 204, three rounds alternated;
// the sink's cost is in both figures alike, so their difference is the
// clients'. Method and figures are printed.
//
//	go test ./internal/work -run '^$' -bench BenchmarkWebhookClients -benchtime 1x
func BenchmarkWebhookClients(b *testing.B) {
	const calls, conc, rounds = 40000, 16, 3
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	h, err := NewWebhook(srv.URL+"/hook", 0, []byte("s3"), NewHTTPClient(conc, nil))
	if err != nil {
		b.Fatal(err)
	}
	fast := NewFastClient(conc, nil)
	defer fast.CloseIdleConnections()
	tk := &worker.Task{ID: "order-1", Type: "order.cancel", Payload: []byte(`{"order":12345}`), ContentType: "application/json",
		Attempt: 1, MaxAttempts: 5, Gen: 1, DueAt: time.Now()}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func() (us, rate, bytes, allocs float64) {
		var wg sync.WaitGroup
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c0, t0 := cpu(), time.Now()
		for range conc {
			wg.Go(func() {
				for range calls / conc {
					if err := h.Handle(b.Context(), tk); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		us, rate = float64((cpu()-c0).Nanoseconds())/1000/calls, calls/time.Since(t0).Seconds()
		runtime.ReadMemStats(&m1)
		return us, rate, float64(m1.TotalAlloc-m0.TotalAlloc) / calls, float64(m1.Mallocs-m0.Mallocs) / calls
	}
	for range b.N {
		fmt.Printf("BenchmarkWebhookClients: %d signed calls from %d goroutines to an in-process net/http sink (204), CPU of this process (getrusage) and its allocations (runtime.MemStats) per call, client and sink\n", calls, conc)
		for r := range rounds {
			h.Fast = nil
			us, rate, by, al := run()
			fmt.Printf("  round %d net/http: %.1f µs per call, %.0f calls/s, %.0f bytes in %.1f allocations per call\n", r+1, us, rate, by, al)
			b.ReportMetric(us, "nethttp-us/call")
			h.Fast = fast
			us2, rate2, by2, al2 := run()
			fmt.Printf("  round %d fasthttp: %.1f µs per call, %.0f calls/s (%.1f µs less), %.0f bytes in %.1f allocations per call\n", r+1, us2, rate2, us-us2, by2, al2)
			b.ReportMetric(us2, "fasthttp-us/call")
		}
	}
	h.Client.CloseIdleConnections()
}
