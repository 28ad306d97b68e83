//go:build linux && !dqslim

package cli

import "syscall"

// childProcAttr makes the kernel kill the redis-server child when dq dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
