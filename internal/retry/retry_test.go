package retry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestBackoffDoublesToMaxWithEqualJitter(t *testing.T) {
	b := Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for range 20 { // jitter is random: several rounds
		b.Reset()
		want := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000}
		for i, w := range want {
			w *= time.Millisecond
			if d := b.Next(); d < w/2 || d > w {
				t.Fatalf("try %d: delay %v, want in [%v, %v]", i+1, d, w/2, w)
			}
		}
	}
}

func TestBackoffNoJitterAndReset(t *testing.T) {
	b := Backoff{Min: 50 * time.Millisecond, Max: 300 * time.Millisecond, NoJitter: true}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{50, 100, 200, 300, 300}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 50*time.Millisecond {
		t.Fatalf("after Reset: %v, want Min", d)
	}
}

// The jitter spreads delays: not every draw is the same.
func TestBackoffJitterVaries(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		b := Backoff{Min: time.Second, Max: time.Second}
		seen[b.Next()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("50 first delays all equal: %v", seen)
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(t.Context(), time.Second) {
			t.Fatal("Sleep with a live context returned false")
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("slept %v, want 1s", got)
		}

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start = time.Now()
		if Sleep(ctx, time.Hour) {
			t.Fatal("Sleep returned true after its context ended")
		}
		if got := time.Since(start); got != 100*time.Millisecond {
			t.Fatalf("cancelled Sleep took %v, want 100ms", got)
		}
	})
}
