//go:build !dqfault && !dqplant

package fault

import "time"

// Enabled reports whether this build has fault injection: not a normal
// build.
const Enabled = false

// Point is a named step of a critical path; in a normal build it does
// nothing (and is inlined away).
func Point(string) {}

// Now is the process' wall clock.
func Now() time.Time { return time.Now() }
