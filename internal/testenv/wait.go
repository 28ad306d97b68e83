package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// pollInterval is how often WaitFor and the readiness checks poll.
const pollInterval = 10 * time.Millisecond

// startTimeout bounds how long any piece of infrastructure may take to
// become ready.
const startTimeout = 10 * time.Second

// FreePort returns a TCP port on 127.0.0.1 for a server the test starts. The
// port lies below the kernel's ephemeral range, is handed out once per test
// process and is reserved against the other test processes (see ports.go),
// so a process that restarts on it finds it still free.
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("testenv: find a free port: %v", err)
	}
	return port
}

// WaitFor polls cond every 10ms until it returns true or timeout passes; then
// it fails the test with msg.
func WaitFor(tb testing.TB, timeout time.Duration, msg string, cond func() bool) {
	tb.Helper()
	if !poll(timeout, cond) {
		tb.Fatalf("testenv: timed out after %v: %s", timeout, msg)
	}
}

// poll calls cond every pollInterval until it returns true (poll reports
// true) or timeout passes (poll reports false). cond is always called at
// least once, and once more at the deadline.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-ticker.C
	}
}

// BuildBinary builds the Go package pkg (e.g. "github.com/delayq/delayq/cmd/event")
// into a fresh temporary directory, for TestMain of packages whose tests run
// real processes. It returns the binary's path and a cleanup that removes it.
func BuildBinary(pkg string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "delayq-bin-")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", path, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build %s: %w", pkg, err)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}
