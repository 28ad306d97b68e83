package testenv

import (
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL the child when the test binary dies
// (a panic, a timeout, kill -9), so no redis-server outlives its test even
// when Cleanup never runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// ProcessCPU is the CPU time this process used so far (user + system):
// with RedisCPU around a phase it tells whether a benchmark is CPU-bound.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
