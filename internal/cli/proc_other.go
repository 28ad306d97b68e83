//go:build !linux && !dqslim

package cli

import "syscall"

func childProcAttr() *syscall.SysProcAttr { return nil }
