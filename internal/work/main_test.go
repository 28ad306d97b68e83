package work

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/testenv"
)

// workBin is the work binary built once for the tests that run processes.
var workBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := testenv.BuildBinary("github.com/delayq/delayq/cmd/work")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workBin = bin
	code := m.Run()
	cleanup()
	if code == 0 {
		// the webhooks' fast client (webhookfast.go): its cleaners end some
		// time after its idle connections were closed
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
