package testenv

import (
	"os"
	"strconv"
	"strings"
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

// CPUTimes reads the machine's busy and total CPU time from /proc/stat
// (zeros if it cannot): with two readings a benchmark tells how busy
// the whole machine was, kernel included, across all cores.
func CPUTimes() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}
