package systems

import (
	"testing"
	"time"
)

func TestRecorderResult(t *testing.T) {
	r := NewRecorder(4)
	due := time.Unix(100, 0)
	r.Expect("a", due)
	r.Expect("b", due)
	r.Expect("never", due)
	r.Seen("a", Seen{At: due.Add(5 * time.Millisecond), Stamp: due.Add(time.Millisecond)})
	r.Seen("a", Seen{At: due.Add(time.Second)}) // a duplicate: the first copy counts
	r.Seen("b", Seen{At: due.Add(-300 * time.Millisecond)})
	r.Seen("cancelled", Seen{At: due})
	res := r.Result()
	if res.Expected != 3 || res.Missing != 1 || res.Duplicates != 1 || res.Unexpected != 1 {
		t.Fatalf("counts %+v", res)
	}
	lags := map[time.Duration]bool{}
	for _, l := range res.Visible {
		lags[l] = true
	}
	if len(res.Visible) != 2 || !lags[5*time.Millisecond] || !lags[-300*time.Millisecond] {
		t.Fatalf("visible lags %v", res.Visible)
	}
	if len(res.Stamp) != 1 || res.Stamp[0] != time.Millisecond {
		t.Fatalf("stamp lags %v", res.Stamp)
	}
	if len(res.Transit) != 1 || res.Transit[0] != 4*time.Millisecond {
		t.Fatalf("transits %v", res.Transit)
	}
	if s, n := r.Lookup("a"); n != 2 || !s.At.Equal(due.Add(5*time.Millisecond)) {
		t.Fatalf("lookup a: %+v %d", s, n)
	}
	first, last := r.SeenSpan()
	if !first.Equal(due.Add(-300*time.Millisecond)) || !last.Equal(due.Add(5*time.Millisecond)) {
		t.Fatalf("span %v %v", first, last)
	}
	if !r.WaitDistinct(3, time.Now()) || r.WaitDistinct(4, time.Now().Add(60*time.Millisecond)) {
		t.Fatal("WaitDistinct")
	}
}
