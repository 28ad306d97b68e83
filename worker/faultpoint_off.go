//go:build !dqfault && !dqplant

package worker

// faultPoint names a step of the record path where the chaos suite may
// crash the process (internal/fault). A normal build does nothing there
// and does not link internal/fault into a user's binary; the fault
// builds (tags dqfault, dqplant) use faultpoint_on.go.
func faultPoint(string) {}
