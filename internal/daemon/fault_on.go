//go:build dqfault || dqplant

package daemon

import "github.com/delayq/delayq/internal/fault"

// faultPoint is fault.Point in the fault builds (see fault_off.go).
func faultPoint(name string) { fault.Point(name) }
