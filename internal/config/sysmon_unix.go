//go:build unix

package config

import (
	"os"
	"syscall"
)

// reexec replaces this process with the running binary, started again
// with the same arguments (the dq binary runs an application by its
// argv[0]) and env. It returns only an error.
func reexec(env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, env)
}
