package admin

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (Server.Run's
// certificate watcher in particular).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
