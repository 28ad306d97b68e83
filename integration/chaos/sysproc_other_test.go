//go:build !linux

package chaos

import "syscall"

// sysProcAttr is the zero value off Linux: there is no Pdeathsig, so an
// interrupted run may leave children behind.
func sysProcAttr() *syscall.SysProcAttr { return nil }
