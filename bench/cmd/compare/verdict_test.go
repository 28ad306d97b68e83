package main

import (
	"strings"
	"testing"
)

// The single-call note says each system's share of redis-server's core,
// and names the bound and the figure 1.5x needs only where both are near
// a whole core.
func TestRedisBoundNote(t *testing.T) {
	// session 22's first base run on the 16-core machine
	got := redisBoundNote(47407, 19.6, 78025, 12.8)
	for _, want := range []string{"delayq 93%", "asynq 100%", "19.6 and 12.8 µs", "both are bound by redis-server", "8.5 µs or less"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
	// a machine where neither fills redis-server's core
	got = redisBoundNote(20078, 35.7, 20637, 32.7)
	if strings.Contains(got, "bound") || !strings.Contains(got, "delayq 72%, asynq 67%") {
		t.Errorf("note %q", got)
	}
}
