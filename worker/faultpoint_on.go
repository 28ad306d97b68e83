//go:build dqfault || dqplant

package worker

import "github.com/delayq/delayq/internal/fault"

// faultPoint is fault.Point in the fault builds (see faultpoint_off.go).
func faultPoint(name string) { fault.Point(name) }
