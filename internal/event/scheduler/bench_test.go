//go:build unix

package scheduler

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/schedule"
)

// Idle schedules (issue 40): schedules whose next tick is far away. What
// a leader spends on them between their ticks is the cost of having them.
//
//	go test -run XXX -bench IdleSchedules -benchtime 20x -count 5 ./internal/event/scheduler/
//
// BenchmarkIdleSchedules is one pass of a leader in its steady state (the
// schedules loaded, nothing changed): ns and allocations per idle schedule
// per pass. BenchmarkIdleSchedulesLeaderCPU runs a real leader
// (DQ_SCHEDULER_INTERVAL 500ms) for 3 s and reports the process's CPU
// time per second (cpu-ms/s); it includes the embedded etcd's share (the
// reads the passes cause), and the same baseline with no schedule.

// putIdle stores n schedules whose next tick is months away from at
// (yearly, in a few time zones).
func (e *env) putIdle(n int) {
	zones := []string{"", "Europe/Berlin", "America/New_York", "Asia/Kolkata"}
	for i := range n {
		e.put(fmt.Sprintf("idle%05d", i), schedule.Spec{Cron: "0 0 0 1 1 *", Timezone: zones[i%len(zones)],
			Task: schedule.Template{Type: "it.idle", Payload: []byte(`{"n":1}`)}})
	}
}

func BenchmarkIdleSchedules(b *testing.B) {
	for _, n := range []int{200, 2000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			e := newEnv(b)
			e.putIdle(n)
			s := e.scheduler("bench", nil)
			at := time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
			e.pass(s, at) // the first pass writes every state
			steady(s)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				at = at.Add(500 * time.Millisecond)
				if err := s.pass(b.Context(), at, e.open()); err != nil {
					b.Fatal(err)
				}
				_ = i
			}
			el := time.Since(start)
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/float64(n), "ns/schedule/pass")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N)/float64(n), "allocs/schedule/pass")
		})
	}
}

func BenchmarkIdleSchedulesLeaderCPU(b *testing.B) {
	for _, n := range []int{0, 2000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			e := newEnv(b)
			e.putIdle(n)
			s := e.scheduler("bench", nil)
			s.cfg.Interval = 500 * time.Millisecond
			ctx, cancel := context.WithCancel(b.Context())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); <-done }()
			deadline := time.Now().Add(30 * time.Second)
			for {
				if st, ok := e.stateOK(fmt.Sprintf("idle%05d", n-1)); (n == 0 && s.Leading()) || (ok && st.SpecRev > 0) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("the leader did not take the schedules up within 30s")
				}
				time.Sleep(20 * time.Millisecond) // a bounded poll
			}
			time.Sleep(time.Second) // settle: the first passes are not idle ones
			b.ResetTimer()
			var cpu time.Duration
			const window = 3 * time.Second
			for range b.N {
				c0 := cpuTime()
				time.Sleep(window) // the measured window of the idle leader
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N)/window.Seconds(), "cpu-ms/s")
		})
	}
}

// stateOK is state without failing the benchmark on a missing one.
func (e *env) stateOK(id string) (schedule.State, bool) {
	st, ok, err := e.sched.State(e.t.Context(), id)
	return st, ok && err == nil
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// steady puts the leader into its steady state: a watch keeps its view
// current (nothing changes in the benchmark, so no watch runs).
func steady(s *Scheduler) { s.view.watched = true }
