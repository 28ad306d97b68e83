//go:build dqfault || dqplant

package engine

import "github.com/delayq/delayq/internal/fault"

// In the fault builds (tags dqfault, dqplant: the chaos suite's binaries)
// every step of the record path is a fault.Point of the same name, where
// DQ_FAULT_CRASH may kill the process. This file is the only one of the
// engine that imports internal/fault.
func init() {
	stepHook = func(s step) { fault.Point(string(s)) }
}
