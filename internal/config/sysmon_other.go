//go:build !unix

package config

import "errors"

// reexec: no exec on this system; the monitor keeps Go's default.
func reexec([]string) error { return errors.New("no exec on this system") }
