package integration

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// testcontainers' Ryuk reaper runs from an image that must be pulled;
	// no registry is reachable here, so it is off and every container and
	// network is removed by the test's own cleanup instead. Set before the
	// first testcontainers call, which reads its configuration once.
	if err := os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if localBinaries.dir != "" {
		_ = os.RemoveAll(localBinaries.dir)
	}
	if pkiDir != "" {
		_ = os.RemoveAll(pkiDir)
	}
	if code == 0 {
		// Every goroutine a test started (webhook servers, Kafka readers,
		// process waiters) must be gone; the Docker client's idle
		// keep-alive connections are not ours.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
