//go:build !dqplant

package redisstore

// A normal build has no planted bugs: script sources and the take's
// arguments go as written. plant_on.go (-tags dqplant, the chaos suite's
// planted builds) rewrites them.

// plantBugs is src unchanged.
func plantBugs(src string) string { return src }

// plantTakeArgs is args unchanged.
func plantTakeArgs(args []any) []any { return args }
