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
