package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// plantCase is a short targeted scenario for one planted bug
// (internal/fault, build tag dqplant) and the checker that must catch it.
type plantCase struct {
	plant    string
	events   int
	shards   int // default 8
	ttl      time.Duration
	rate     float64
	eventEnv map[string]string
	// script applies the scenario's faults; it runs on the test
	// goroutine while the workload runs, from the workload's start.
	script func(t *testing.T, c *cluster, start time.Time)
	// caught is the checker's count for this bug; the planted build must
	// make it non-zero, the normal build under the same scenario must not.
	caught func(v *verdict) int
	what   string
}

var plantCases = []plantCase{
	{
		// A leader cut off etcd whose lease is revoked keeps taking until
		// its own lease bookkeeping expires (up to TTL - margin after its
		// last keep-alive answer, 1.5-2.5s with the default 3s TTL); the
		// fence is what refuses it. Few shards and a dense workload, so
		// that it finds due tasks meanwhile.
		plant: "nofence", events: 3, shards: 4, ttl: 3 * time.Second, rate: 60,
		script: func(t *testing.T, c *cluster, start time.Time) {
			for _, at := range []time.Duration{3 * time.Second, 7 * time.Second} {
				sleepUntil(start.Add(at))
				p, lease, _ := c.topLeader(func(*proc) bool { return true })
				if p == nil {
					continue
				}
				heal, err := c.cutAndRevoke(p, lease)
				if err != nil {
					t.Logf("chaos: %v", err)
					continue
				}
				time.Sleep(3 * time.Second) // the fault's duration: past the leader's own lease bookkeeping
				heal()
			}
		},
		caught: func(v *verdict) int { return len(v.stale) },
		what:   "stale-leader writes",
	},
	{
		// Produce requests hang and are dropped while the event
		// processes are killed: an ack sent before Kafka confirmed loses
		// the batch in flight.
		plant: "earlyack", events: 2, ttl: 2 * time.Second, rate: 40,
		script: func(t *testing.T, c *cluster, start time.Time) {
			sleepUntil(start.Add(3 * time.Second))
			c.kf.setSlow(3*time.Second, true)
			for _, at := range []time.Duration{4500 * time.Millisecond, 7500 * time.Millisecond} {
				sleepUntil(start.Add(at))
				for _, p := range c.byRole[eventRole] {
					p.kill(300 * time.Millisecond)
				}
			}
			sleepUntil(start.Add(9 * time.Second))
			c.kf.setSlow(0, false)
		},
		caught: func(v *verdict) int { return len(v.lost) },
		what:   "lost tasks",
	},
	{
		// Event processes whose clock runs 3s ahead: only a take that
		// trusts the process clock fires early.
		plant: "localclock", events: 2, ttl: 2 * time.Second, rate: 40,
		eventEnv: map[string]string{"DQ_FAULT_CLOCK_SKEW": "3s"},
		caught:   func(v *verdict) int { return v.early() },
		what:     "early records",
	},
}

// plantBudget bounds TestChaosCatchesPlantedBugs after its builds: six
// clusters at once run about 15s of workload each; a passing run takes
// about 70s on two cores.
const plantBudget = 4 * time.Minute

// TestChaosCatchesPlantedBugs shows that each checker catches the bug it
// exists for: the event binary built with -tags dqplant runs a short
// targeted scenario with DQ_PLANT set, and the checker must report the
// violation; the normal build runs the same scenario alongside as the
// control and must report none.
func TestChaosCatchesPlantedBugs(t *testing.T) {
	s := settings(t)
	planted := binaries(t, "dqplant")
	normal := binaries(t, "")
	watchdog(t, plantBudget, s.seed)
	for _, pc := range plantCases {
		t.Run(pc.plant, func(t *testing.T) {
			t.Parallel()
			var pv, cv *verdict
			// Both runs at once; t.Run("runs") returns when both ended.
			t.Run("runs", func(t *testing.T) {
				t.Run("planted", func(t *testing.T) {
					t.Parallel()
					bins := map[role]string{daemonRole: normal[daemonRole], eventRole: planted[eventRole]}
					pv = runPlantCase(t, pc, bins, s.seed, pc.plant)
				})
				t.Run("control", func(t *testing.T) {
					t.Parallel()
					cv = runPlantCase(t, pc, normal, s.seed, "")
				})
			})
			if pv == nil || cv == nil {
				return // a subtest failed to run; it said why
			}
			if n := pc.caught(pv); n == 0 {
				t.Errorf("chaos: planted bug %s was not caught: 0 %s (seed %d)", pc.plant, pc.what, s.seed)
			} else {
				t.Logf("chaos: planted bug %s caught: %d %s; first: %s", pc.plant, n, pc.what, firstViolation(pv))
			}
			if bad := cv.violations(); len(bad) > 0 {
				t.Errorf("chaos: the normal build failed the %s scenario (seed %d):\n  %s", pc.plant, s.seed, strings.Join(bad[:min(len(bad), 10)], "\n  "))
			}
		})
	}
}

// runPlantCase runs one scenario on a small cluster (one daemon, no work
// processes: the checks need only Kafka) and returns the verdict.
func runPlantCase(t *testing.T, pc plantCase, bins map[role]string, seed uint64, plant string) *verdict {
	env := map[string]string{}
	for k, v := range pc.eventEnv {
		env[k] = v
	}
	if plant != "" {
		env["DQ_PLANT"] = plant
	}
	setDoing(t, "starting the cluster")
	c := startCluster(t, clusterConfig{
		Daemons: 1, Events: pc.events, Shards: pc.shards, EtcdMembers: 1, SessionTTL: pc.ttl,
		Bins: bins, EventEnv: env, Seed: seed,
	})
	obs := startObserver(t, c.kafka)
	hist := newHistory()
	w := newWorkload(workloadConfig{
		Rate: pc.rate, MinDelay: time.Second, MaxDelay: 3 * time.Second,
		RescheduleP: 0.1, CancelP: 0.1, Prefix: fmt.Sprintf("p%s%d", plant, seed),
	}, seed, c.daemonURLs(), hist)
	const runFor = 13 * time.Second
	start := time.Now()
	ctx, stop := context.WithDeadline(t.Context(), start.Add(runFor))
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx) })
	if pc.script != nil {
		setDoing(t, "running the scenario's faults")
		pc.script(t, c, start)
	}
	sleepUntil(start.Add(runFor))
	faultsEnd := time.Now()
	c.restore(30 * time.Second)
	setDoing(t, "waiting for the workload's last requests")
	if !waitDone(&wg, workloadDrain) {
		t.Fatalf("chaos: the workload's requests have not all returned %v after the scenario (every goroutine's stack: %s)",
			workloadDrain, dumpGoroutines(t, "workload stuck"))
	}
	setDoing(t, "waiting until every task fired")
	settle := waitSettled(t, hist, obs, c.sink, false, 12*time.Second)
	setDoing(t, "reading the topics back and checking")
	v := check(hist.snapshot(), readAll(t, c.kafka, obs), nil, checkOptions{faultsEnd: faultsEnd.UnixMilli()})
	_, fenced := c.crashCounts()
	name := "normal build"
	if plant != "" {
		name = "DQ_PLANT=" + plant
	}
	t.Logf("chaos: %s, %s: tasks %d, must fire %d, fired %d, records %d, lost %d, early %d (fired-at %d / seen %d), cancelled-but-fired %d, stale-leader writes %d, duplicates %d, fence refusals %d, settled in %s",
		pc.plant, name, v.tasks, v.mustFire, v.fired, v.records, len(v.lost), v.early(), len(v.earlyFired), len(v.earlySeen),
		len(v.cancelledFired), len(v.stale), v.dupRecords, fenced, settle.Round(100*time.Millisecond))
	if v.fired == 0 {
		t.Errorf("chaos: %s scenario fired nothing: it tested nothing", pc.plant)
	}
	return v
}

func firstViolation(v *verdict) string {
	if bad := v.violations(); len(bad) > 0 {
		return bad[0]
	}
	return "-"
}

// sleepUntil waits for a point of a scenario's schedule.
func sleepUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d) // the schedule's next step, not a wait for a condition
	}
}
