package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
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
// the given build tags ("" or "dqplant"), once per test binary, like the
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
		args := []string{"build", "-trimpath"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		args = append(args, "-o", b.dir+string(filepath.Separator), "./cmd/daemon", "./cmd/event", "./cmd/work")
		ctx, cancel := context.WithTimeout(context.Background(), buildLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool(), args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.WaitDelay = 10 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: not done after %v", err, buildLimit)
			}
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
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

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}
