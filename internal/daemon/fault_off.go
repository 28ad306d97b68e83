//go:build !dqfault && !dqplant

package daemon

// faultPoint names a step of the daemon where the chaos suite may crash
// the process (internal/fault). A normal build does nothing there and does
// not link internal/fault; the fault builds (tags dqfault, dqplant) use
// fault_on.go.
func faultPoint(string) {}
