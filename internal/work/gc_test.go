package work

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// tuneGC sets GOGC 400 and a memory limit below the machine's (or the
// container's) memory when the environment sets neither, and leaves each
// alone when the environment sets it. It changes this process' collector:
// the test puts the settings back.
func TestTuneGC(t *testing.T) {
	prevPercent := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	})
	// automemlimit reads the process' own GOMEMLIMIT and AUTOMEMLIMIT
	for _, k := range []string{"GOMEMLIMIT", "AUTOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Cleanup(func() { _ = os.Setenv(k, v) })
			_ = os.Unsetenv(k)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	attrs := tuneGC(env(nil), log)
	if p := debug.SetGCPercent(100); p != gcPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", p, gcPercent)
	}
	if l := debug.SetMemoryLimit(math.MaxInt64); l <= 0 || l == math.MaxInt64 {
		t.Errorf("GOMEMLIMIT unset: memory limit %d, want a limit from the cgroup or the machine's memory", l)
	}
	if len(attrs) != 4 || attrs[0] != "gogc" || attrs[1] != uint64(gcPercent) || attrs[2] != "gomemlimit_bytes" {
		t.Errorf("start log attributes %v, want gogc %d and gomemlimit_bytes", attrs, gcPercent)
	}

	// set in the environment: the runtime read them at start, tuneGC
	// leaves them (here: what the test set above)
	tuneGC(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}), log)
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC set: GC percent changed to %d", p)
	}
	if l := debug.SetMemoryLimit(math.MaxInt64); l != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set: memory limit changed to %d", l)
	}
}
