//go:build dqfault || dqplant

package engine

import "testing"

// A fault build installs the step hook that makes each step of the
// record path a fault.Point of its name (the chaos suite's crash points:
// after-claim, after-handle, before-finish).
func TestFaultBuildsInstallTheStepHook(t *testing.T) {
	if stepHook == nil {
		t.Fatal("no step hook in a fault build")
	}
	for _, s := range []step{stepAfterClaim, stepAfterHandle, stepBeforeFinish} {
		at(s) // not armed (no DQ_FAULT_CRASH): returns
	}
}
