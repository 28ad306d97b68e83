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
	redis    redisMode
	acks     int // DQ_REDIS_REPLICA_ACKS in cluster mode
}

// settings reads DQ_CHAOS_SEED (default: from the clock, printed so that
// the run can be replayed), DQ_CHAOS_DURATION (default 2m, 30s with
// -short), DQ_CHAOS_REDIS (single or cluster; default single) and
// DQ_CHAOS_REPLICA_ACKS (cluster mode; default 1).
func settings(t *testing.T) runSettings {
	t.Helper()
	s := runSettings{seed: uint64(time.Now().UnixNano() % 1_000_000_000), duration: 2 * time.Minute,
		redis: redisModeFromEnv(t), acks: replicaAcksFromEnv(t)}
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
	runChaos(t, s, chaosRun{kinds: faultKinds(s.redis), everyKindFrom: 2 * time.Minute, crashes: true})
}

// failoverKinds are TestChaosFailover's faults: the Redis ones and the
// process faults that meet a worker storing its outcome again.
var failoverKinds = []string{faultRedisFailover, faultRedisRestart, faultKill, faultCrashPoints}

// failoverDuration is TestChaosFailover's default (30s with -short).
const failoverDuration = 60 * time.Second

// TestChaosFailover is the cluster mode's short run in the default
// suite: Redis Cluster, DQ_REDIS_REPLICA_ACKS (DQ_CHAOS_REPLICA_ACKS,
// default 1), the primary failover, master kill+restart, process kill -9
// and fire-path crash points for 60s (DQ_CHAOS_DURATION does not apply;
// DQ_CHAOS_SEED does).
func TestChaosFailover(t *testing.T) {
	s := settings(t)
	s.redis, s.duration = redisClusterMode, failoverDuration
	if testing.Short() {
		s.duration = 30 * time.Second
	}
	runChaos(t, s, chaosRun{kinds: failoverKinds, everyKindFrom: 30 * time.Second, fixed: true})
}

// chaosRun is what differs between the chaos tests.
type chaosRun struct {
	kinds         []string      // the nemesis' fault kinds
	everyKindFrom time.Duration // a run this long must apply every kind
	crashes       bool          // ... and crash a process at a fault point
	fixed         bool          // the test sets its Redis mode and duration itself
}

func runChaos(t *testing.T, s runSettings, r chaosRun) {
	env := fmt.Sprintf("DQ_CHAOS_SEED=%d ", s.seed)
	if !r.fixed {
		env += fmt.Sprintf("DQ_CHAOS_DURATION=%s ", s.duration)
		if s.redis == redisClusterMode {
			env += "DQ_CHAOS_REDIS=cluster "
		}
	}
	if s.redis == redisClusterMode {
		env += fmt.Sprintf("DQ_CHAOS_REPLICA_ACKS=%d ", s.acks)
	}
	replay := fmt.Sprintf("%sgo test -count=1 -timeout %s ./integration/chaos -run '%s$'",
		env, (2*s.duration + 5*time.Minute).Round(time.Minute), t.Name())
	t.Logf("chaos: seed %d, duration %s, redis %s (replay: %s)", s.seed, s.duration, s.redis, replay)
	// Also straight to stderr: go test shows it with a failing package's
	// output even when the test binary is ended before the test returns.
	fmt.Fprintf(os.Stderr, "chaos: %s seed %d, duration %s, redis %s; replay: %s\n", t.Name(), s.seed, s.duration, s.redis, replay)

	bins := binaries(t, "")
	watchdog(t, chaosBudget(s.duration), s.seed)
	setDoing(t, "starting the cluster")
	c := startCluster(t, clusterConfig{
		Daemons: 2, Events: 3, Works: 2, EtcdMembers: 3,
		SessionTTL:  2 * time.Second,
		Bins:        bins,
		Seed:        s.seed,
		Redis:       s.redis,
		ReplicaAcks: s.acks,
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
	n.kinds = r.kinds
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
	sum := summary(s, n.kinds, n.counts, crashes, fenced, v, settle, time.Since(start)) + "  none stuck: " + stuck.line()
	if c.ha != nil {
		sum += "\n  redis cluster: " + c.ha.summaryLine()
	}
	t.Log("\n" + sum)
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
	if s.duration >= r.everyKindFrom {
		for _, k := range n.kinds {
			if n.counts[k] == 0 {
				t.Errorf("chaos: fault kind %q was never applied in %s (seed %d)", k, s.duration, s.seed)
			}
		}
		if r.crashes && len(crashes) == 0 {
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
func summary(s runSettings, kinds []string, faults map[string]int, crashes map[string]int, fenced int, v *verdict, settle, total time.Duration) string {
	var b strings.Builder
	row := func(k string, val any) { fmt.Fprintf(&b, "  %-60s %v\n", k, val) }
	fmt.Fprintf(&b, "chaos summary — seed %d, faults for %s, whole run %s, redis %s", s.seed, s.duration, total.Round(time.Second), s.redis)
	if s.redis == redisClusterMode {
		fmt.Fprintf(&b, " (DQ_REDIS_REPLICA_ACKS=%d)", s.acks)
	}
	b.WriteString("\n")
	b.WriteString(" faults applied\n")
	totalFaults := 0
	for _, k := range kinds {
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
