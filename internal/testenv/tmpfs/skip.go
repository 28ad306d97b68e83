package tmpfs

import (
	"os"
	"testing"
)

// requireEnv makes a missing tmpfs a failure instead of a skip.
const requireEnv = "DQ_REQUIRE_TMPFS"

// unavailable ends the test: a failure when requireEnv is set, else a
// loud skip naming the cause.
func unavailable(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv(requireEnv) != "" {
		tb.Fatalf("tmpfs: %v, and %s is set", err, requireEnv)
	}
	tb.Skipf("SKIP (no tmpfs): %v; set %s=1 to make this a failure", err, requireEnv)
}
