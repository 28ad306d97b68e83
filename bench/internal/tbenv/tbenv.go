// Package tbenv is a minimal testing.TB for programs: it lets the benchmark
// program reuse delayq's test infrastructure (internal/testenv: redis-server
// children, embedded etcd, kfake) outside `go test`.
//
// Why an adapter rather than a Go test: the comparison is a program with
// its own flags (-short, -out, -charts, -md) that a Makefile target runs
// with `go run`; testenv's helpers only need Helper, Cleanup, TempDir,
// Context, Logf and Fatalf, which this type provides.
//
// A fatal error anywhere (any goroutine) runs every registered cleanup —
// child processes are killed, servers closed — and exits with status 1.
// Scopes (Sub) group the cleanups of one workload so that its processes
// stop when the workload ends, not at the end of the run.
package tbenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// TB implements testing.TB. The embedded interface is nil: it only
// provides testing.TB's unexported method; every exported method is
// implemented below.
type TB struct {
	testing.TB

	name   string
	root   *root
	parent *TB
	out    io.Writer

	mu       sync.Mutex
	cleanups []func()
	children []*TB
	closed   bool
	tmp      string

	ctx    context.Context
	cancel context.CancelFunc
	failed atomic.Bool
}

type root struct {
	top      *TB
	aborting atomic.Bool
	exit     func(int)
}

// New returns the root scope; log lines go to out. Close it at the end of
// the program.
func New(name string, out io.Writer) *TB {
	t := &TB{name: name, out: out}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.root = &root{top: t, exit: os.Exit}
	return t
}

// FatalOnSignal makes SIGINT and SIGTERM fail the program through t
// (Fatalf: the cleanups run, so every process and server it started is
// stopped), with what it is doing named in the message.
func (t *TB) FatalOnSignal(doing string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		t.Fatalf("interrupted by %v: %s", s, doing)
	}()
}

// Sub returns a child scope whose cleanups run at its Close (or, if it is
// never closed, with its parent's).
func (t *TB) Sub(name string) *TB {
	c := &TB{name: t.name + "/" + name, out: t.out, root: t.root, parent: t}
	c.ctx, c.cancel = context.WithCancel(t.ctx)
	t.mu.Lock()
	t.children = append(t.children, c)
	t.mu.Unlock()
	return c
}

// Close runs the scope's cleanups (children first, then its own in reverse
// order of registration) and removes its temporary directories. Closing
// twice is a no-op.
func (t *TB) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	children := t.children
	t.mu.Unlock()
	for i := len(children) - 1; i >= 0; i-- {
		children[i].Close()
	}
	t.cancel()
	t.mu.Lock()
	fns := t.cleanups
	t.cleanups = nil
	tmp := t.tmp
	t.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	if tmp != "" {
		_ = os.RemoveAll(tmp)
	}
}

// Cleanup registers fn to run when the scope closes.
func (t *TB) Cleanup(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, fn)
}

// Context is cancelled when the scope starts closing.
func (t *TB) Context() context.Context { return t.ctx }

// TempDir returns a new directory, removed when the scope closes.
func (t *TB) TempDir() string {
	t.mu.Lock()
	base, err := t.tmp, error(nil)
	if base == "" {
		base, err = os.MkdirTemp("", "delayq-bench-")
		t.tmp = base
	}
	t.mu.Unlock()
	if err != nil {
		t.Fatalf("tbenv: temp dir: %v", err)
	}
	d, err := os.MkdirTemp(base, "d")
	if err != nil {
		t.Fatalf("tbenv: temp dir: %v", err)
	}
	return d
}

// ArtifactDir is a temporary directory (nothing is kept).
func (t *TB) ArtifactDir() string { return t.TempDir() }

// Name is the scope's name.
func (t *TB) Name() string { return t.name }

// Helper does nothing: there are no test line numbers to adjust.
func (t *TB) Helper() {}

// Attr is ignored.
func (t *TB) Attr(key, value string) {}

// Output is where log lines go.
func (t *TB) Output() io.Writer { return t.out }

// Log prints a line.
func (t *TB) Log(args ...any) { fmt.Fprintln(t.out, append([]any{t.name + ":"}, args...)...) }

// Logf prints a formatted line.
func (t *TB) Logf(format string, args ...any) { fmt.Fprintf(t.out, t.name+": "+format+"\n", args...) }

// Error logs and marks the scope (and its parents) failed.
func (t *TB) Error(args ...any) { t.Log(args...); t.Fail() }

// Errorf logs and marks the scope failed.
func (t *TB) Errorf(format string, args ...any) { t.Logf(format, args...); t.Fail() }

// Fail marks the scope and its parents failed.
func (t *TB) Fail() {
	for s := t; s != nil; s = s.parent {
		s.failed.Store(true)
	}
}

// Failed reports whether the scope failed.
func (t *TB) Failed() bool { return t.failed.Load() }

// FailNow runs every cleanup of the whole program and exits with status 1.
func (t *TB) FailNow() {
	t.Fail()
	if !t.root.aborting.CompareAndSwap(false, true) {
		// A cleanup failed while aborting: do not run cleanups again.
		t.root.exit(1)
		return
	}
	t.root.top.Close()
	t.root.exit(1)
}

// Fatal logs and aborts the program (see FailNow).
func (t *TB) Fatal(args ...any) { t.Log(args...); t.FailNow() }

// Fatalf logs and aborts the program (see FailNow).
func (t *TB) Fatalf(format string, args ...any) { t.Logf(format, args...); t.FailNow() }

// Skip aborts: the benchmark never skips a part silently.
func (t *TB) Skip(args ...any) { t.Fatal(append([]any{"skip:"}, args...)...) }

// Skipf aborts (see Skip).
func (t *TB) Skipf(format string, args ...any) { t.Fatalf("skip: "+format, args...) }

// SkipNow aborts (see Skip).
func (t *TB) SkipNow() { t.Fatal("skip") }

// Skipped is always false.
func (t *TB) Skipped() bool { return false }

// Setenv sets an environment variable until the scope closes.
func (t *TB) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		t.Fatalf("tbenv: setenv %s: %v", key, err)
	}
	t.Cleanup(func() {
		if had {
			_ = os.Setenv(key, old)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

// Chdir changes the working directory until the scope closes.
func (t *TB) Chdir(dir string) {
	old, err := os.Getwd()
	if err != nil {
		t.Fatalf("tbenv: getwd: %v", err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatalf("tbenv: chdir %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = os.Chdir(old) })
}

var _ testing.TB = (*TB)(nil)
