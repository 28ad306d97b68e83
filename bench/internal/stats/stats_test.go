package stats

import (
	"testing"
	"time"
)

func TestQuantileNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	if s.P50ms != 500 || s.P99ms != 990 || s.P999ms != 999 || s.MaxMs != 1000 || s.MinMs != 1 {
		t.Fatalf("quantiles %+v", s)
	}
	if s.EarlyShare != 0 || s.EarlyMaxMs != 0 {
		t.Fatalf("no sample is negative, got %+v", s)
	}
}

func TestEarlyShare(t *testing.T) {
	s := Summarize([]time.Duration{-300 * time.Millisecond, -1, 0, 5 * time.Millisecond})
	if s.EarlyShare != 0.5 || s.EarlyMaxMs != 300 {
		t.Fatalf("early: %+v", s)
	}
	if s.N != 4 || s.MaxMs != 5 {
		t.Fatalf("summary: %+v", s)
	}
}

func TestCDFEndsAtOne(t *testing.T) {
	var ds []time.Duration
	for i := range 1001 {
		ds = append(ds, time.Duration(i))
	}
	pts := CDF(Sorted(ds), 100)
	if len(pts) < 100 || len(pts) > 102 {
		t.Fatalf("%d points", len(pts))
	}
	if last := pts[len(pts)-1]; last.Share != 1 || last.Ms != float64(1000)/1e6 {
		t.Fatalf("last point %+v", last)
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].Share < pts[i-1].Share || pts[i].Ms < pts[i-1].Ms {
			t.Fatalf("not monotonic at %d: %+v %+v", i, pts[i-1], pts[i])
		}
	}
}
