//go:build !linux

package testenv

import "syscall"

// sysProcAttr is the zero value off Linux: there is no Pdeathsig, so a
// crashed test binary may leave children behind.
func sysProcAttr() *syscall.SysProcAttr { return nil }
