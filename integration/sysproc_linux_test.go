package integration

import "syscall"

// sysProcAttr kills a child when the test process dies, so that a crashed
// or interrupted test run leaves no binaries running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
