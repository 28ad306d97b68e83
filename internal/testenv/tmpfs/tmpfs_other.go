//go:build !linux

package tmpfs

import (
	"errors"
	"testing"
)

// Mount is Linux only: elsewhere the test is skipped, naming why (a
// failure when DQ_REQUIRE_TMPFS is set).
func Mount(tb testing.TB, size int64) string {
	tb.Helper()
	unavailable(tb, errors.New("mounting a tmpfs is Linux only"))
	return ""
}
