//go:build dqplant

package redisstore

import (
	"strings"
	"testing"
)

// Each planted bug finds the source it rewrites: an edit of the scripts
// that moved the line would leave the chaos suite's planted build without
// its bug (and TestChaosCatchesPlantedBugs failing for the wrong reason).
func TestPlantedBugsRewrite(t *testing.T) {
	t.Setenv("DQ_PLANT", "nofence")
	for name, src := range map[string]string{"take.lua": takeLua, "settle.lua": settleLua, "adopt.lua": adoptLua} {
		if got := plantBugs(src); !strings.Contains(got, "local stale = nil and fence(") {
			t.Errorf("nofence: %s keeps its fence", name)
		}
	}
	t.Setenv("DQ_PLANT", "localclock")
	if got := plantBugs(takeLua); !strings.Contains(got, "local now = tonumber(ARGV[7])") {
		t.Error("localclock: take.lua keeps Redis TIME")
	}
	if got := plantBugs(claimLua); got != claimLua {
		t.Error("localclock: rewrote claim.lua, not only the take")
	}
	if args := plantTakeArgs([]any{1}); len(args) != 2 {
		t.Errorf("localclock: take arguments %v, want the process clock added", args)
	}
	t.Setenv("DQ_PLANT", "")
	if got := plantBugs(takeLua); got != takeLua {
		t.Error("no plant: take.lua rewritten")
	}
}
