package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A hang must never eat go test's package timeout: every call in the
// nemesis, heal, restore and teardown path that can block (an etcd member
// stopping or restarting, redis-server restarting, a process that does not
// exit, a proxy or a watcher that does not stop) runs under a time limit,
// and the failure names what got stuck and prints every goroutine. A
// watchdog bounds each test as a whole, cleanups included.

// Limits of the steps that start or stop something. A step that needs more
// is stuck.
const (
	procStepLimit  = 20 * time.Second // SIGTERM, up to 5s, SIGKILL, exit
	etcdStopLimit  = 30 * time.Second // leadership hand-over (up to 7s) and server stop
	etcdStartLimit = 30 * time.Second // testenv waits up to 10s for readiness
	redisStepLimit = 20 * time.Second // testenv waits up to 10s for PING
	closeLimit     = 15 * time.Second // a proxy, a watcher, a consumer stopping
)

// doing is what the test goroutine of the running chaos tests is doing
// now, for the watchdog's message.
var doing sync.Map // test name -> string

func setDoing(t testing.TB, what string) { doing.Store(t.Name(), what) }

// stepTB is the testing.TB handed to a testenv helper run off the test
// goroutine: Fatal records the failure and ends only the step's goroutine;
// the step then fails the test from the test goroutine.
type stepTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
	left atomic.Bool // the step was given up on: the test may be over
}

func (s *stepTB) Helper() {}

// Log and Logf go to the test while it waits for the step; a step given up
// on must not log into a test that may have ended (testing panics then).
func (s *stepTB) Logf(format string, args ...any) {
	if !s.left.Load() {
		s.TB.Logf(format, args...)
	}
}

func (s *stepTB) Log(args ...any) {
	if !s.left.Load() {
		s.TB.Log(args...)
	}
}

func (s *stepTB) record(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, msg)
}

func (s *stepTB) Errorf(format string, args ...any) { s.record(fmt.Sprintf(format, args...)) }
func (s *stepTB) Error(args ...any)                 { s.record(fmt.Sprint(args...)) }
func (s *stepTB) Fail()                             { s.record("failed") }
func (s *stepTB) FailNow()                          { s.record("failed"); runtime.Goexit() }
func (s *stepTB) Fatalf(format string, args ...any) { s.Errorf(format, args...); runtime.Goexit() }
func (s *stepTB) Fatal(args ...any)                 { s.Error(args...); runtime.Goexit() }

func (s *stepTB) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.errs) > 0
}

func (s *stepTB) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(s.errs, "; "))
}

// errStuck is returned by runStep for a step that did not finish in time.
type errStuck struct {
	what  string
	limit time.Duration
	dump  string // where the goroutine dump went
}

func (e *errStuck) Error() string {
	return fmt.Sprintf("%s did not finish within %v: stuck (every goroutine's stack: %s)", e.what, e.limit, e.dump)
}

// runStep runs fn on a goroutine of its own and waits at most limit. A
// failure fn reports through its testing.TB comes back as an error; a
// step still running at the limit is left behind (its goroutine cannot be
// stopped), the goroutines are dumped, and an *errStuck comes back.
func runStep(t testing.TB, what string, limit time.Duration, fn func(tb testing.TB)) error {
	st := &stepTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(st)
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
		return st.err()
	case <-timer.C:
		st.left.Store(true)
		return &errStuck{what: what, limit: limit, dump: dumpStacks(t, "stuck: "+what)}
	}
}

// step is runStep on the test goroutine: any failure fails the test now.
func step(t testing.TB, what string, limit time.Duration, fn func(tb testing.TB)) {
	t.Helper()
	setDoing(t, what)
	if err := runStep(t, what, limit, fn); err != nil {
		t.Fatalf("chaos: %s: %v", what, err)
	}
	setDoing(t, "after "+what)
}

// waitDone waits for wg at most limit and reports whether it finished.
func waitDone(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// waitCleanup is waitDone for a cleanup: a goroutine that does not stop
// fails the test with a goroutine dump instead of hanging the package.
func waitCleanup(t testing.TB, what string, wg *sync.WaitGroup) {
	t.Helper()
	if !waitDone(wg, closeLimit) {
		t.Errorf("chaos: %s did not stop within %v: stuck (every goroutine's stack: %s)", what, closeLimit, dumpGoroutines(t, "stuck: "+what))
	}
}

var dumps atomic.Int32

// dumpStacks is dumpGoroutines; the guard's own test replaces it.
var dumpStacks = dumpGoroutines

// dumpGoroutines writes every goroutine's stack to stderr and, with
// DQ_CHAOS_LOG_DIR, to a file there; it returns where it went.
func dumpGoroutines(t testing.TB, why string) string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	where := "stderr"
	if d := os.Getenv("DQ_CHAOS_LOG_DIR"); d != "" {
		path := filepath.Join(d, fmt.Sprintf("goroutines-%d.txt", dumps.Add(1)))
		if err := os.WriteFile(path, buf, 0o644); err == nil {
			where = "stderr and " + path
		}
	}
	fmt.Fprintf(os.Stderr, "\n=== chaos: %s (%s): every goroutine's stack\n%s\n=== end of goroutine dump\n", t.Name(), why, buf)
	return where
}

// watchdog bounds a whole test, its cleanups included: past budget (or 30s
// before go test's -timeout, whichever comes first) it
// prints what the test was doing, the seed and every goroutine's stack,
// and ends the test binary (the supervised binaries and redis-server die
// with it: Pdeathsig). go test's own -timeout would print the same stacks
// only after the package's whole budget (20 minutes in CI) was gone. Call
// it before anything that registers a cleanup: it is disarmed by the
// cleanup that runs last.
func watchdog(t *testing.T, budget time.Duration, seed uint64) {
	t.Helper()
	name := t.Name()
	start := time.Now()
	// Before go test's own -timeout too (10 minutes by default), so that
	// the message says what the suite was doing.
	if dl, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(dl)-30*time.Second)
	}
	timer := time.AfterFunc(budget, func() {
		var what []string
		doing.Range(func(k, v any) bool {
			if k := k.(string); k == name || strings.HasPrefix(k, name+"/") {
				what = append(what, fmt.Sprintf("%s: %s", k, v))
			}
			return true
		})
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "\n=== chaos watchdog: %s (seed %d) still running %v after it started (budget %v); it was at: %v\n"+
			"=== every goroutine's stack:\n%s\n=== chaos watchdog: ending the test binary\n",
			name, seed, time.Since(start).Round(time.Second), budget, strings.Join(what, "; "), buf)
		os.Exit(3)
	})
	t.Cleanup(func() {
		timer.Stop()
		doing.Range(func(k, _ any) bool {
			if k := k.(string); k == name || strings.HasPrefix(k, name+"/") {
				doing.Delete(k)
			}
			return true
		})
	})
}

// TestGuard checks the step guard itself: a failure reported through the
// step's testing.TB comes back as an error without ending the test, and a
// step that blocks is reported as stuck at its limit.
func TestGuard(t *testing.T) {
	dumped := ""
	dumpStacks = func(_ testing.TB, why string) string { dumped = why; return "(not dumped in this test)" }
	defer func() { dumpStacks = dumpGoroutines }()

	if err := runStep(t, "ok", time.Second, func(testing.TB) {}); err != nil {
		t.Errorf("a step that returned: %v", err)
	}
	err := runStep(t, "fatal", time.Second, func(tb testing.TB) {
		tb.Fatalf("member %d: %s", 2, "not ready")
		panic("Fatalf returned")
	})
	if err == nil || !strings.Contains(err.Error(), "member 2: not ready") {
		t.Errorf("a step that called Fatalf: got %v", err)
	}
	release := make(chan struct{})
	var left sync.WaitGroup
	left.Add(1)
	err = runStep(t, "blocked heal", 50*time.Millisecond, func(testing.TB) { defer left.Done(); <-release })
	var stuck *errStuck
	if !errors.As(err, &stuck) || stuck.what != "blocked heal" || dumped != "stuck: blocked heal" {
		t.Errorf("a step that blocks: got %v (dumped %q)", err, dumped)
	}
	close(release)
	left.Wait()
}
