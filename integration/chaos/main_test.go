package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	builds.mu.Lock()
	for _, b := range builds.byTags {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
	builds.mu.Unlock()
	if code == 0 {
		// Every goroutine a test started (proxies, the workload, the
		// observer, process waiters) must be gone.
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

// buildLimit bounds one go build of the binaries: from a cold build cache
// on two busy cores it takes 2-4 minutes.
const buildLimit = 8 * time.Minute

// build is one set of binaries built with the same tags.
type build struct {
	once sync.Once
	dir  string
	path map[role]string
	err  error
}

var builds = struct {
	mu     sync.Mutex
	byTags map[string]*build
}{byTags: map[string]*build{}}

// binaries builds cmd/daemon, cmd/event and cmd/work from this tree with
// fault injection (tag dqfault) and the given build tags ("" or
// "dqplant"), once per test binary, like the
// integration suite builds them (static, -trimpath), so the compiled
// packages are shared through the build cache.
func binaries(t testing.TB, tags string) map[role]string {
	t.Helper()
	builds.mu.Lock()
	b := builds.byTags[tags]
	if b == nil {
		b = &build{}
		builds.byTags[tags] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		start := time.Now()
		b.dir, b.err = os.MkdirTemp("", "dq-chaos-bin-")
		if b.err != nil {
			return
		}
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			b.err = err
			return
		}
		ctx, cancel := context.WithTimeoutCause(context.Background(), buildLimit, fmt.Errorf("not done after %v", buildLimit))
		defer cancel()
		// Fault injection exists only in dqfault builds (internal/fault).
		buildTags := "dqfault"
		if tags != "" {
			buildTags += "," + tags
		}
		if b.err = testenv.GoBuild(ctx, root, b.dir, buildTags, "./cmd/daemon", "./cmd/event", "./cmd/work"); b.err != nil {
			return
		}
		b.path = map[role]string{}
		for _, r := range []role{daemonRole, eventRole, workRole} {
			b.path[r] = filepath.Join(b.dir, string(r))
		}
		fmt.Fprintf(os.Stderr, "chaos: built the binaries (tags %q) in %.1fs\n", tags, time.Since(start).Seconds())
	})
	if b.err != nil {
		t.Fatalf("chaos: build binaries: %v", b.err)
	}
	return b.path
}
