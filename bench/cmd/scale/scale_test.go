package main

import (
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
