package worker

import (
	"testing"
	"time"
)

func TestBackoffBase(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 10 * time.Minute, Factor: 2}
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{10, 512 * time.Second}, {11, 10 * time.Minute}, {1000, 10 * time.Minute},
	} {
		if got := b.Base(c.attempt); got != c.want {
			t.Errorf("Base(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
}

func TestBackoffJitter(t *testing.T) {
	b := Backoff{Min: time.Second, Max: time.Minute, Factor: 2, Jitter: 0.5}
	if got := b.Delay(3, 0); got != 4*time.Second {
		t.Errorf("Delay(3, 0) = %v", got)
	}
	if got := b.Delay(3, 0.999999); got <= 2*time.Second || got > 2*time.Second+time.Millisecond {
		t.Errorf("Delay(3, ~1) = %v, want just above 2s", got)
	}
	full := Backoff{Min: time.Second, Max: time.Minute, Jitter: 1}
	if got := full.Delay(2, 0.75); got != 500*time.Millisecond {
		t.Errorf("full jitter Delay(2, .75) = %v", got)
	}
	none := Backoff{Min: time.Second, Jitter: -1}
	if got := none.Delay(2, 0.9); got != 2*time.Second {
		t.Errorf("no jitter Delay(2, .9) = %v", got)
	}
}

// With the default jitter every attempt waits longer than the one before,
// whatever the random draws, until the cap.
func TestBackoffDelaysGrow(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Hour}
	for n := 1; n < 15; n++ {
		for _, u1 := range []float64{0, 0.3, 0.999999} {
			for _, u2 := range []float64{0, 0.5, 0.999999} {
				if d1, d2 := b.Delay(n, u1), b.Delay(n+1, u2); d2 <= d1 {
					t.Fatalf("attempt %d waits %v (u=%v), attempt %d waits %v (u=%v)", n, d1, u1, n+1, d2, u2)
				}
			}
		}
	}
	for range 1000 {
		if d := b.next(40); d > time.Hour || d < 30*time.Minute {
			t.Fatalf("capped delay %v", d)
		}
	}
}

func TestBackoffValidate(t *testing.T) {
	for _, b := range []Backoff{
		{Min: time.Minute, Max: time.Second},
		{Min: time.Second, Max: time.Minute, Factor: 0.5},
		{Min: time.Second, Max: time.Minute, Factor: 2, Jitter: 1.5},
	} {
		if err := b.withDefaults().validate(); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
}
