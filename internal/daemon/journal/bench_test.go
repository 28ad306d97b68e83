package journal

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// benchData is about the size of an encoded task with a small payload.
var benchData = bytes.Repeat([]byte("t"), 256)

// BenchmarkAppend measures fsync'd Appends on the disk under TMPDIR:
// sequential single-entry calls (one commit each), sequential 100-entry calls,
// and single-entry calls from many goroutines, which Append coalesces into
// shared commits. The entries/s metric is the figure to compare.
func BenchmarkAppend(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		j := openT(b, b.TempDir())
		i := 0
		for b.Loop() {
			if _, err := j.Append(b.Context(), Entry{ID: fmt.Sprintf("t%d", i), Data: benchData}); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})

	b.Run("sequential-batch100", func(b *testing.B) {
		const per = 100
		j := openT(b, b.TempDir())
		batch := make([]Entry, per)
		n := 0
		for b.Loop() {
			for k := range batch {
				batch[k] = Entry{ID: fmt.Sprintf("t%d", n), Data: benchData}
				n++
			}
			if _, err := j.Append(b.Context(), batch...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
	})

	for _, goroutines := range []int{8, 64} {
		b.Run(fmt.Sprintf("parallel-%d", goroutines), func(b *testing.B) {
			j := openT(b, b.TempDir())
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range goroutines {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if _, err := j.Append(b.Context(), Entry{ID: fmt.Sprintf("t%d", i), Data: benchData}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
