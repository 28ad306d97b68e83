package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// runSettings are the knobs a run reads from the environment.
type runSettings struct {
	seed     uint64
	duration time.Duration
}

// settings reads DQ_CHAOS_SEED (default: from the clock, printed so that
// the run can be replayed) and DQ_CHAOS_DURATION (default 2m, 30s with
// -short).
func settings(t *testing.T) runSettings {
	t.Helper()
	s := runSettings{seed: uint64(time.Now().UnixNano() % 1_000_000_000), duration: 2 * time.Minute}
	if testing.Short() {
		s.duration = 30 * time.Second
	}
	if v := os.Getenv("DQ_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DQ_CHAOS_SEED %q: want a non-negative integer", v)
		}
		s.seed = n
	}
	if v := os.Getenv("DQ_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 10*time.Second {
			t.Fatalf("DQ_CHAOS_DURATION %q: want a Go duration of at least 10s", v)
		}
		s.duration = d
	}
	return s
}

// TestChaos runs the whole system under a seeded nemesis for
// DQ_CHAOS_DURATION and fails on any lost, early, cancelled-but-fired,
// unexpected or stale-leader record. A run of two minutes or more must
// also have applied every fault kind.
func TestChaos(t *testing.T) {
	s := settings(t)
	replay := fmt.Sprintf("DQ_CHAOS_SEED=%d DQ_CHAOS_DURATION=%s go test -count=1 -timeout %s ./integration/chaos -run 'TestChaos$'",
		s.seed, s.duration, (2*s.duration + 5*time.Minute).Round(time.Minute))
	t.Logf("chaos: seed %d, duration %s (replay: %s)", s.seed, s.duration, replay)
	// Also straight to stderr: go test shows it with a failing package's
	// output even when the test binary is ended before the test returns.
	fmt.Fprintf(os.Stderr, "chaos: TestChaos seed %d, duration %s; replay: %s\n", s.seed, s.duration, replay)

	bins := binaries(t, "")
	watchdog(t, chaosBudget(s.duration), s.seed)
	setDoing(t, "starting the cluster")
	c := startCluster(t, clusterConfig{
		Daemons: 2, Events: 3, Works: 2, EtcdMembers: 3,
		SessionTTL: 2 * time.Second,
		Bins:       bins,
		Seed:       s.seed,
	})
	obs := startObserver(t, c.kafka)
	hist := newHistory()
	w := newWorkload(workloadConfig{
		Rate: 20, MinDelay: time.Second, MaxDelay: 8 * time.Second,
		RescheduleP: 0.2, CancelP: 0.2, Prefix: fmt.Sprintf("c%d", s.seed),
	}, s.seed, c.daemonURLs(), hist)

	start := time.Now()
	ctx, stop := context.WithDeadline(t.Context(), start.Add(s.duration))
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx) })
	n := newNemesis(t, c, s.seed)
	gw := watchGroup(t, c.kafka, c.ns+"-work", n.start)
	n.run(start.Add(s.duration))
	faultsEnd := time.Now()
	c.restore(60 * time.Second)
	setDoing(t, "waiting for the workload's last requests")
	if !waitDone(&wg, workloadDrain) {
		t.Fatalf("chaos: the workload's requests have not all returned %v after the faults ended (every goroutine's stack: %s)",
			workloadDrain, dumpGoroutines(t, "workload stuck"))
	}
	setDoing(t, "waiting until every task fired and was handled")
	settle := waitSettled(t, hist, obs, c.sink, true, 90*time.Second)

	setDoing(t, "checking that no task is stuck")
	stuck := checkNoneStuck(t, c, hist.snapshot(), n.poisonTasks(), stuckBound)

	setDoing(t, "reading the topics back and checking")
	recs := readAll(t, c.kafka, obs)
	v := check(hist.snapshot(), recs, c.sink.snapshot(), checkOptions{handled: true, faultsEnd: faultsEnd.UnixMilli()})
	crashes, fenced := c.crashCounts()
	t.Log("\n" + summary(s, n.counts, crashes, fenced, v, settle, time.Since(start)) + "  none stuck: " + stuck.line())
	t.Logf("chaos: nemesis timeline\n%s", strings.Join(mergeTimelines(n.timeline, gw.timeline()), "\n"))

	if bad := v.violations(); len(bad) > 0 {
		t.Errorf("chaos: %d violations with seed %d; replay with:\n  %s\nfirst ones:\n  %s",
			len(bad), s.seed, replay, strings.Join(bad[:min(len(bad), 20)], "\n  "))
	}
	if len(stuck.stuck) > 0 {
		t.Errorf("chaos: %d tasks stuck %s after the heal (seed %d); replay with:\n  %s\nfirst ones:\n  %s",
			len(stuck.stuck), stuckBound, s.seed, replay, strings.Join(stuck.stuck[:min(len(stuck.stuck), 20)], "\n  "))
	}
	if v.mustFire == 0 || v.fired == 0 {
		t.Errorf("chaos: the workload fired nothing (%d tasks that must fire): the run tested nothing", v.mustFire)
	}
	if s.duration >= 2*time.Minute {
		for _, k := range allFaults {
			if n.counts[k] == 0 {
				t.Errorf("chaos: fault kind %q was never applied in %s (seed %d)", k, s.duration, s.seed)
			}
		}
		if len(crashes) == 0 {
			t.Errorf("chaos: no process crashed at a fault-injection point (seed %d)", s.seed)
		}
	}
}

// stuckBound is how long after the settle every task may take to show an
// end (or a due time ahead): a poison task's grace, a retry's backoff and a
// lease, with room for a slow machine.
const stuckBound = 60 * time.Second

// workloadDrain bounds the wait for the workload's last requests: a
// follow-up waits at most MaxDelay, then up to two daemons are tried with
// a 5s client timeout each.
const workloadDrain = 30 * time.Second

// chaosBudget is how long TestChaos may run, from the cluster's start to
// the end of its cleanups, before the watchdog ends it: the faults, plus
// the bounded waits after them (restore 60s, settle 90s, the none-stuck
// check 60s, reading the topics 60s) and the starts and stops. A passing 2-minute run takes about
// 2m30s.
func chaosBudget(d time.Duration) time.Duration { return d + 6*time.Minute }

// mergeTimelines merges lines that start with their offset in seconds.
func mergeTimelines(a, b []string) []string {
	out := append(append([]string(nil), a...), b...)
	sort.SliceStable(out, func(i, j int) bool { return lineAt(out[i]) < lineAt(out[j]) })
	return out
}

func lineAt(s string) float64 {
	f, _ := strconv.ParseFloat(strings.TrimSuffix(strings.Fields(s)[0], "s"), 64)
	return f
}

// waitSettled waits until every task that must fire has been seen in Kafka
// (and handled, when handled is set), at most timeout; it returns how long
// that took.
func waitSettled(t *testing.T, hist *history, obs *observer, sk *sink, handled bool, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	tasks := hist.snapshot()
	for {
		missing := 0
		for i := range tasks {
			tk := &tasks[i]
			if tk.mustFire() && (!obs.fired(tk.id) || (handled && !sk.has(tk.id))) {
				missing++
			}
		}
		if missing == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Logf("chaos: %d tasks still not fired or handled %v after the faults ended", missing, timeout)
			return time.Since(start)
		}
		time.Sleep(250 * time.Millisecond) // poll of a bounded wait
	}
}

// summary renders the run's figures as a table.
func summary(s runSettings, faults map[string]int, crashes map[string]int, fenced int, v *verdict, settle, total time.Duration) string {
	var b strings.Builder
	row := func(k string, val any) { fmt.Fprintf(&b, "  %-44s %v\n", k, val) }
	fmt.Fprintf(&b, "chaos summary — seed %d, faults for %s, whole run %s\n", s.seed, s.duration, total.Round(time.Second))
	b.WriteString(" faults applied\n")
	totalFaults := 0
	for _, k := range allFaults {
		row(k, faults[k])
		totalFaults += faults[k]
	}
	row("all faults", totalFaults)
	row("crashes at fault points", formatCounts(crashes))
	row("fence refusals logged by event processes", fenced)
	b.WriteString(" workload\n")
	row("tasks", v.tasks)
	row("schedules accepted (of which journaled)", fmt.Sprintf("%d (%d)", v.accepted, v.journaled))
	row("schedules refused / unknown outcome", fmt.Sprintf("%d / %d", v.refused, v.unknownSchedules))
	row("reschedules ok / cancels ok", fmt.Sprintf("%d / %d", v.rescheduled, v.cancelled))
	row("follow-ups refused / unknown outcome", fmt.Sprintf("%d / %d", v.opsRefused, v.opsUnknown))
	row("tasks that must fire", v.mustFire)
	row("tasks fired / handled", fmt.Sprintf("%d / %d", v.fired, v.handledTasks))
	row("records dq.tasks / dq.dead (not seen live)", fmt.Sprintf("%d / %d (%d)", v.records, v.deadRecords, v.unseen))
	b.WriteString(" checks\n")
	row("lost", len(v.lost))
	row("early (fired-at / seen / handled)", fmt.Sprintf("%d (%d / %d / %d)", v.early(), len(v.earlyFired), len(v.earlySeen), len(v.earlyHandled)))
	row("fired after a successful cancel", len(v.cancelledFired))
	row("unexpected", len(v.unexpected))
	row("stale-leader writes", len(v.stale))
	row("duplicate records / deliveries", fmt.Sprintf("%d / %d", v.dupRecords, v.dupHandled))
	row("firing lag during faults p50/p99/max", lagLine(v.lagDuring))
	row("firing lag after faults p50/p99/max", lagLine(v.lagAfter))
	row("all fired and handled after the heal in", settle.Round(100*time.Millisecond))
	return b.String()
}

func lagLine(xs []int64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%dms / %dms / %dms (%d tasks)", percentile(xs, 50), percentile(xs, 99), percentile(xs, 100), len(xs))
}
