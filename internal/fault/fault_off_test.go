//go:build !dqfault && !dqplant

package fault

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// A normal build ignores the fault settings: a crash point armed with
// probability 1 does not kill the process, and the clock is not skewed.
// The test re-runs itself as a child with the settings in its environment
// (a dqfault build reads them at init, so only a child can have them).
func TestNormalBuildHasNoFaultInjection(t *testing.T) {
	if os.Getenv("DQ_FAULT_CRASH") != "" {
		Point("after-take")
		if d := time.Since(Now()); d < -time.Second || d > time.Second {
			os.Exit(3)
		}
		os.Exit(0)
	}
	if Enabled {
		t.Fatal("Enabled in a build without the dqfault tag")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestNormalBuildHasNoFaultInjection$")
	cmd.Env = append(os.Environ(), "DQ_FAULT_CRASH=after-take=1", "DQ_FAULT_CLOCK_SKEW=-1h")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("a normal build acted on DQ_FAULT_*: %v\n%s", err, out)
	}
	if Plant("nofence") {
		t.Fatal("a normal build has no planted bugs")
	}
}
