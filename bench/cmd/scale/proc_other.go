//go:build !linux

package main

import "syscall"

// sysProcAttr: no parent-death signal outside Linux; the cleanups stop
// the children.
func sysProcAttr() *syscall.SysProcAttr { return nil }
