package testenv

import "syscall"

// sysProcAttr makes the kernel SIGKILL the child when the test binary dies
// (a panic, a timeout, kill -9), so no redis-server outlives its test even
// when Cleanup never runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
