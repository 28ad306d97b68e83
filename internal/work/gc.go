package work

import (
	"log/slog"
	"runtime/debug"
	"runtime/metrics"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// The work process' garbage collector (docs/design.md "The work
// process' garbage collector"). A webhook-handled task allocates a few
// KiB (the record, its parse, the claim's reply, the outcome's calls and
// record) that are garbage a few milliseconds later, so at Go's default
// GOGC of 100 the collector runs many short cycles and, with its
// allocation assists, was a tenth of a busy work process' CPU. At 400
// the work process used 29.4-30.9 µs of CPU per webhook-handled task
// against 31.5-32.8 (make bench-scale's handled phase, runs alternated),
// for a higher peak resident size (72-74 MB -> 128-135 MB at that load).
// A soft memory limit keeps the larger heap from costing an
// out-of-memory kill: the collector runs as often as it must to stay
// under it.
const (
	// gcPercent is the work process' GOGC unless the environment sets one.
	gcPercent = 400
	// memLimitRatio is the share of the container's memory limit (or the
	// machine's memory, without a limit) the Go heap is kept under
	// unless the environment sets GOMEMLIMIT.
	memLimitRatio = 0.9
)

// tuneGC applies those defaults to this process (the work binary, before
// it builds anything): GOGC gcPercent unless GOGC is set, and GOMEMLIMIT
// memLimitRatio of the cgroup's memory limit (v1 or v2; the machine's
// memory without one: github.com/KimMachineGun/automemlimit) unless
// GOMEMLIMIT is set or AUTOMEMLIMIT=off. It returns the settings in force
// for the start log; they are also go_gc_gogc_percent and
// go_gc_gomemlimit_bytes on /metrics.
func tuneGC(getenv func(string) string, log *slog.Logger) []any {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		// Set skips itself when the process' GOMEMLIMIT or AUTOMEMLIMIT=off
		// is set, and logs through log what it did not manage
		_, _ = memlimit.Set(memlimit.WithRatio(memLimitRatio),
			memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
			memlimit.WithLogger(log.With("component", "gc")))
	}
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	return []any{"gogc", s[0].Value.Uint64(), "gomemlimit_bytes", s[1].Value.Uint64()}
}
