//go:build !linux

package testenv

import (
	"syscall"
	"time"
)

// sysProcAttr is the zero value off Linux: there is no Pdeathsig, so a
// crashed test binary may leave children behind.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// ProcessCPU is zero here: only Linux builds read it (getrusage).
func ProcessCPU() time.Duration { return 0 }

// CPUTimes is zero here: only Linux builds read it (/proc/stat).
func CPUTimes() (busy, total uint64) { return 0, 0 }
