package config

import (
	"io"
	"log/slog"
	"os"
	"strings"
)

// The Go runtime's monitor thread (docs/design.md "The Go runtime's
// monitor thread"). Go's sysmon sleeps 20 µs between its rounds and
// doubles the sleep only after 50 rounds with nothing to do; when every P
// of the process is idle it sleeps until the next timer, and the next
// goroutine that enters a system call wakes it (a futex wake on that
// goroutine's path) and starts it again at 20 µs. A delayq binary is
// that shape all day: it waits on the network, wakes for a few records or
// requests, makes system calls, waits again, so its monitor ran tens of
// thousands of rounds a second. Under make bench-scale's handled phase
// that was 7-8% of a work process' CPU in nanosleep and about half of its
// context switches (perf: docs/benchmarks.md, session 38). With
// GODEBUG=schedtrace set, sysmon never takes that deep sleep, so no
// system call wakes it, and its sleep grows to 10 ms whenever it has
// nothing to retake: nanosleep fell to 0.5% of the work processes' CPU,
// their task switches from 13.7% to 6.5%. The interval is the longest schedtrace takes (2^31-1 ms, 24.8
// days): the runtime prints one "SCHED" line to stderr per interval of
// the machine's monotonic clock, at start too on a machine up longer than
// that, and its scheduler state when the process crashes.
const SysmonGodebug = "schedtrace=2147483647"

// SysmonEnv is environ with SysmonGodebug added to GODEBUG (appended to
// the settings there), and true; or environ and false when GODEBUG names
// schedtrace already: the operator's own value (GODEBUG=schedtrace=0
// keeps Go's default) or this process after KeepSysmonAwake's exec.
func SysmonEnv(environ []string) ([]string, bool) {
	out := make([]string, 0, len(environ)+1)
	godebug, seen := "", false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			if !seen { // the first, as Go's own lookup reads it
				godebug, seen = v, true
			}
			continue
		}
		out = append(out, kv)
	}
	for f := range strings.SplitSeq(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(f), "schedtrace=") {
			return environ, false
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, "GODEBUG="+godebug+SysmonGodebug), true
}

// KeepSysmonAwake is the first step of a delayq binary's main: it
// executes the running binary again, with the same arguments and
// SysmonEnv's environment (Go reads schedtrace only when a process
// starts), and returns only where it does not: the setting is in force
// already (or the operator set schedtrace), or the exec failed (the
// process goes on with Go's default, and says so on stderr, as every
// binary's JSON log). A process' environment shows the setting in force
// (/proc/PID/environ, ps e).
func KeepSysmonAwake(stderr io.Writer) {
	env, add := SysmonEnv(os.Environ())
	if !add {
		return
	}
	if err := reexec(env); err != nil {
		slog.New(slog.NewJSONHandler(stderr, nil)).Warn("could not start again with GODEBUG="+SysmonGodebug+": the Go runtime's monitor thread keeps its default",
			"component", "runtime", "err", err)
	}
}
