//go:build dqfault

package fault

import (
	"testing"
	"time"
)

func TestConfigure(t *testing.T) {
	t.Cleanup(func() { _ = Configure("", "", "") })
	if err := Configure("after-take=0.5, before-ack=1", "7", "-2s"); err != nil {
		t.Fatal(err)
	}
	if points["after-take"] != 0.5 || points["before-ack"] != 1 {
		t.Fatalf("points %v", points)
	}
	if d := time.Since(Now()); d < 1900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("skewed Now is %v behind, want about 2s", d)
	}
	Point("not-configured") // must return
	for _, bad := range [][3]string{{"x", "", ""}, {"x=2", "", ""}, {"x=-1", "", ""}, {"", "seven", ""}, {"", "", "soon"}} {
		if err := Configure(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("Configure%q: want an error", bad)
		}
	}
	if Plant("nofence") {
		t.Fatal("a normal build has no planted bugs")
	}
}
