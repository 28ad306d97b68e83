package main

import "syscall"

// sysProcAttr makes the kernel SIGKILL a child when this program dies
// without running its cleanups (kill -9, a crash), so no delayq process
// outlives the benchmark.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
