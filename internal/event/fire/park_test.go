package fire

import (
	"testing"
	"time"
)

func TestParkForBacksOffWithinTheGrace(t *testing.T) {
	for _, c := range []struct {
		n    int
		left time.Duration
		want time.Duration
	}{
		{1, time.Minute, 100 * time.Millisecond},
		{2, time.Minute, 200 * time.Millisecond},
		{4, time.Minute, 800 * time.Millisecond},
		{5, time.Minute, 2 * time.Second},
		{50, time.Minute, 2 * time.Second},
		{3, 150 * time.Millisecond, 150 * time.Millisecond}, // not past the grace
		{3, -time.Second, time.Millisecond},                 // grace over: at once
	} {
		if got := parkFor(c.n, c.left); got != c.want {
			t.Errorf("parkFor(%d, %v) = %v, want %v", c.n, c.left, got, c.want)
		}
	}
}
