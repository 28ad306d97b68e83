//go:build !dqfault && !dqplant

package fire

// faultPoint names a step of the fire path where the chaos suite may crash
// the process (internal/fault). A normal build does nothing there and does
// not link internal/fault; the fault builds (tags dqfault, dqplant) use
// fault_on.go.
func faultPoint(string) {}

// plantEarlyAck reports the planted bug "earlyack" (fault_on.go): never in
// a normal build.
func plantEarlyAck() bool { return false }
