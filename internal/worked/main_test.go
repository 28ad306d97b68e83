package worked

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var nsSeq atomic.Int64

// testNS is a namespace unique to the test.
func testNS(tb testing.TB) string {
	tb.Helper()
	name := strings.NewReplacer("/", "-", " ", "_").Replace(tb.Name())
	return fmt.Sprintf("t%d-%s", nsSeq.Add(1), name)
}
