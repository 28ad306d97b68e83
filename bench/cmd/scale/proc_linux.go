package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL a child when this program dies
// without running its cleanups (kill -9, a crash), so no delayq process
// outlives the benchmark.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procCPU is the CPU time (user + system) process pid has used so far, 0
// when /proc does not tell (the process is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// the fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * clockTick
}

// selfCPU is the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
