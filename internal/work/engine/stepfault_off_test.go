//go:build !dqfault && !dqplant

package engine

import "testing"

// A production build installs no step hook: the crash points of the
// record path cost a nil check and link nothing.
func TestNoStepHookInProductionBuilds(t *testing.T) {
	if stepHook != nil {
		t.Fatal("a step hook is installed in a build without the dqfault and dqplant tags")
	}
}
