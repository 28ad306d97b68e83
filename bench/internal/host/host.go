// Package host is what the bench commands need to know about the machine
// and the checkout they run in.
package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RepoRoot walks up from the working directory to the directory whose
// go.mod declares module github.com/delayq/delayq.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module github.com/delayq/delayq\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of github.com/delayq/delayq above the working directory; run from the repository or bench/")
		}
		dir = parent
	}
}

// LoadAverage is the 1, 5 and 15 minute load average ("unknown" where
// /proc/loadavg cannot be read).
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
