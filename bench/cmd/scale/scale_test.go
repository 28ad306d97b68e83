package main

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// A watch counts each id of its prefix once, measures lag from the due
// header and closes when the last one arrives.
func TestWatch(t *testing.T) {
	w := newWatch("p-", 3)
	due := time.UnixMilli(1_000_000)
	at := due.Add(5 * time.Millisecond)
	ms := strconv.FormatInt(due.UnixMilli(), 10)
	w.see("other-1", ms, at)
	w.see("p-1", ms, at)
	w.see("p-1", ms, at.Add(time.Second))
	w.see("p-2", ms, at.Add(time.Millisecond))
	if w.wait(0) {
		t.Fatal("done after 2 of 3")
	}
	w.see("p-3", "bad", at.Add(2*time.Millisecond))
	if !w.wait(time.Second) {
		t.Fatal("not done after 3 of 3")
	}
	n, first, last, lags, dups := w.snapshot()
	if n != 3 || dups != 1 || !first.Equal(at) || !last.Equal(at.Add(2*time.Millisecond)) || len(lags) != 2 {
		t.Fatalf("n %d dups %d first %v last %v lags %v", n, dups, first, last, lags)
	}
	if lags[0] != 5*time.Millisecond || lags[1] != 6*time.Millisecond {
		t.Fatalf("lags %v, want 5ms 6ms", lags)
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	q := quantiles(ds)
	if q.P50 != 500 || q.P99 != 990 || q.P999 != 999 || q.Max != 1000 {
		t.Fatalf("%+v", q)
	}
	if q := quantiles(nil); q != (Lags{}) {
		t.Fatalf("empty: %+v", q)
	}
}

// procCPU reads a process's user + system time from /proc: for this
// process it agrees with getrusage, after a burn that both must see.
func TestProcCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/stat is Linux's; elsewhere procCPU reports 0 by design")
	}
	// spin until this process used 300ms of CPU, by getrusage (a spin of
	// 300ms of wall time got less than half of that on a loaded machine)
	p0, s0 := procCPU(os.Getpid()), selfCPU()
	for deadline := time.Now().Add(30 * time.Second); selfCPU()-s0 < 300*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("no 300ms of CPU in 30s (getrusage: %v)", selfCPU()-s0)
		}
	}
	p, s := procCPU(os.Getpid())-p0, selfCPU()-s0
	if p < 200*time.Millisecond {
		t.Fatalf("after 300ms of CPU by getrusage (%v), /proc says %v", s, p)
	}
	if d := p - s; d > 60*time.Millisecond || d < -60*time.Millisecond {
		t.Fatalf("/proc %v and getrusage %v differ by more than a few ticks", p, s)
	}
	if procCPU(1<<30) != 0 {
		t.Fatal("a process that does not exist used CPU")
	}
}

// coresBusy divides each kind's CPU time by the window.
func TestCoresBusy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuSnap{at: t0, masters: []time.Duration{0, time.Second}, bench: time.Second}
	b := cpuSnap{at: t0.Add(2 * time.Second), masters: []time.Duration{time.Second, 2*time.Second + 500*time.Millisecond},
		daemons: time.Second, events: 500 * time.Millisecond, workers: 4 * time.Second, bench: 3 * time.Second}
	b.broker = time.Second
	c := coresBusy(a, b)
	if c.Seconds != 2 || c.Redis != 1.25 || c.BusiestMaster != 0.75 || c.Daemons != 0.5 || c.Events != 0.25 || c.Workers != 2 || c.Broker != 0.5 || c.Bench != 1 || c.Total != 5.5 {
		t.Fatalf("%+v", c)
	}
	if c := coresBusy(a, a); c.Total != 0 {
		t.Fatalf("an empty window: %+v", c)
	}
}

// perTask divides each kind's CPU time by the tasks; the pipeline is
// delayq's own processes and Redis, the broker and the bench apart.
func TestPerTask(t *testing.T) {
	a := cpuSnap{masters: []time.Duration{0, time.Second}, broker: time.Second}
	z := cpuSnap{masters: []time.Duration{time.Second, 3 * time.Second}, daemons: time.Second, events: 2 * time.Second,
		workers: 4 * time.Second, broker: 2 * time.Second, bench: 5 * time.Second}
	p := perTask(a, z, 1000)
	if p.Redis != 3000 || p.Daemons != 1000 || p.Events != 2000 || p.Workers != 4000 || p.Pipeline != 10000 || p.Broker != 1000 || p.Bench != 5000 {
		t.Fatalf("%+v", p)
	}
}
