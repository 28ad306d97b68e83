//go:build !linux

package main

import (
	"syscall"
	"time"
)

// sysProcAttr: no parent-death signal outside Linux; the cleanups stop
// the children.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// procCPU: /proc is Linux's; elsewhere the processes' cores are not told.
func procCPU(int) time.Duration { return 0 }

// selfCPU: see procCPU.
func selfCPU() time.Duration { return 0 }
