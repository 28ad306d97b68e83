//go:build dqfault || dqplant

package fire

import "github.com/delayq/delayq/internal/fault"

// faultPoint is fault.Point in the fault builds (see fault_off.go).
func faultPoint(name string) { fault.Point(name) }

// plantEarlyAck reports the planted bug "earlyack": the poller acks a
// batch before Kafka confirmed it (fault.Plant, builds tagged dqplant).
func plantEarlyAck() bool { return fault.Plant("earlyack") }
