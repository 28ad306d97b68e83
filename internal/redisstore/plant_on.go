//go:build dqplant

package redisstore

import (
	"strings"

	"github.com/delayq/delayq/internal/fault"
	"github.com/delayq/delayq/internal/task"
)

// The store's planted bugs (internal/fault's Plant, chosen by DQ_PLANT),
// compiled only into builds tagged dqplant: the chaos suite shows with
// them that its checkers catch each bug (integration/chaos, planted_test.go).
// A normal build uses plant_off.go and does not link internal/fault.
//
//   - nofence: the fence of every script never refuses a token;
//   - localclock: the take trusts the process clock (ARGV[7], fault.Now)
//     instead of Redis TIME.

// plantBugs rewrites a script's source (before its prelude is chosen) for
// the planted bug DQ_PLANT names, if any.
func plantBugs(src string) string {
	if fault.Plant("nofence") {
		src = strings.Replace(src, "local stale = fence(", "local stale = nil and fence(", 1)
	}
	if src == takeLua && fault.Plant("localclock") {
		src = strings.Replace(src, "local now = now_ms()", "local now = tonumber(ARGV[7])", 1)
	}
	return src
}

// plantTakeArgs adds the process clock to a take's arguments (ARGV[7])
// under localclock.
func plantTakeArgs(args []any) []any {
	if fault.Plant("localclock") {
		return append(args, task.Millis(fault.Now()))
	}
	return args
}
