package chaos

import "syscall"

// sysProcAttr kills a child when the test process dies, so that an
// interrupted run leaves no binaries behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
