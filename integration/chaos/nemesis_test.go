package chaos

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/testenv"
)

// The fault kinds, in the order the summary lists them.
const (
	faultKill         = "kill -9 (then restart)"
	faultCrashPoints  = "fire-path crash points armed"
	faultPause        = "SIGSTOP top leader > TTL"
	faultPartRedis    = "partition process-Redis"
	faultPartEtcd     = "partition process-etcd"
	faultLeaseRevoke  = "lease revoked, leader cut off"
	faultEtcdMember   = "etcd member loss"
	faultEtcdQuorum   = "etcd quorum loss"
	faultRedisRestart = "Redis kill -9 + restart (AOF)"
	faultKafkaErrors  = "kfake produce errors"
	faultKafkaSlow    = "kfake slow produce/fetch"
	faultClockSkew    = "clock skew (DQ_FAULT_CLOCK_SKEW)"
	faultRedisOOM     = "Redis OOM (maxmemory below use)"
	faultPoisonTopic  = "poison task: missing topic"
	faultPoisonLarge  = "poison task: oversized record"
	// cluster mode only
	faultRedisFailover = "Redis primary failover (link cut, kill -9, replica promoted)"
)

var allFaults = []string{
	faultKill, faultCrashPoints, faultPause, faultPartRedis, faultPartEtcd, faultLeaseRevoke,
	faultEtcdMember, faultEtcdQuorum, faultRedisRestart, faultKafkaErrors, faultKafkaSlow, faultClockSkew,
	faultRedisOOM, faultPoisonTopic, faultPoisonLarge, faultRedisFailover,
}

// faultKinds are the kinds a run in mode applies. In cluster mode the
// Redis partition is left out (a cluster client dials the node addresses
// CLUSTER SLOTS names, not a proxy); Redis kill+restart and OOM hit the
// cluster's masters; the primary failover exists only there.
func faultKinds(mode redisMode) []string {
	return slices.DeleteFunc(slices.Clone(allFaults), func(k string) bool {
		if mode == redisClusterMode {
			return k == faultPartRedis
		}
		return k == faultRedisFailover
	})
}

// Crash-point settings (internal/fault): low probabilities per batch, so
// that an armed process crashes every few seconds and the run still makes
// progress.
const (
	eventCrashPoints = "after-take=0.02,after-produce=0.02,before-ack=0.02"
	workCrashPoints  = "after-claim=0.02,after-handle=0.02,before-finish=0.02"
	// a daemon's journal replay runs a page at a time, and only after an
	// outage: a higher probability, so that an armed daemon that replays
	// dies between a page's write and its journal commit (half the pages)
	daemonCrashPoints = "after-replay=0.5"
)

// active is a fault in force until its heal runs.
type active struct {
	kind  string
	what  string
	uses  []string // resources no other fault may use meanwhile
	until time.Time
	heal  func(tb testing.TB) // runs under limit (see step)
	limit time.Duration       // n.applyLimit(kind)
}

// nemesis applies a seeded schedule of faults, at most maxActive at once,
// each bounded in time. It runs on the test goroutine (the etcd and Redis
// helpers fail the test from there). The kinds come in seeded rounds: each
// round applies every kind once, in a random order, so a run of a few
// rounds applies every kind.
type nemesis struct {
	t         *testing.T
	c         *cluster
	rng       *rand.Rand
	kinds     []string // the kinds it applies: faultKinds of the Redis mode unless the test sets them
	maxActive int
	counts    map[string]int
	active    []*active
	queue     []string
	start     time.Time
	timeline  []string
	poison    poisonLog     // poison tasks scheduled, checked after the heal
	rdb       *redis.Client // straight to redis-server, not through a proxy; nil in cluster mode
}

func newNemesis(t *testing.T, c *cluster, seed uint64) *nemesis {
	n := &nemesis{t: t, c: c, rng: rand.New(rand.NewPCG(seed, 0xfa17)), kinds: faultKinds(c.cfg.Redis), maxActive: 2,
		counts: map[string]int{}, start: time.Now()}
	if c.redis != nil {
		n.rdb = c.redis.Client(t)
	}
	return n
}

// poisonTasks are the poison tasks the run scheduled.
func (n *nemesis) poisonTasks() []poisonTask { return n.poison.snapshot() }

func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
}

func (n *nemesis) note(format string, args ...any) {
	n.timeline = append(n.timeline, fmt.Sprintf("%7.2fs ", time.Since(n.start).Seconds())+fmt.Sprintf(format, args...))
}

func (n *nemesis) busy(res string) bool {
	for _, a := range n.active {
		if slices.Contains(a.uses, res) {
			return true
		}
	}
	return false
}

// pick returns a random process of the given roles that no fault uses.
func (n *nemesis) pick(roles ...role) *proc {
	var cands []*proc
	for _, p := range n.c.procs {
		if slices.Contains(roles, p.role) && !n.busy(p.name) && p.running() {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[n.rng.IntN(len(cands))]
}

// run applies faults until end, then heals everything.
func (n *nemesis) run(end time.Time) {
	for time.Now().Before(end) {
		n.healDue(time.Now())
		if len(n.active) < n.maxActive {
			n.startNext()
		}
		wait := n.between(500*time.Millisecond, 2*time.Second)
		for _, a := range n.active {
			wait = min(wait, time.Until(a.until))
		}
		wait = min(wait, time.Until(end))
		if wait > 0 {
			time.Sleep(wait) // the schedule's next step, not a wait for a condition
		}
	}
	n.healAll()
}

func (n *nemesis) healDue(now time.Time) {
	keep := n.active[:0]
	for _, a := range n.active {
		if now.Before(a.until) {
			keep = append(keep, a)
			continue
		}
		n.healOne(a)
	}
	n.active = keep
}

func (n *nemesis) healOne(a *active) {
	if a.heal != nil {
		step(n.t, fmt.Sprintf("nemesis: heal %s (%s)", a.kind, a.what), a.limit, a.heal)
	}
	n.note("heal   %s (%s)", a.kind, a.what)
}

func (n *nemesis) healAll() {
	for _, a := range n.active {
		n.healOne(a)
	}
	n.active = nil
}

// startNext applies the first kind of the current round that can be
// applied now.
func (n *nemesis) startNext() {
	if len(n.queue) == 0 {
		n.queue = slices.Clone(n.kinds)
		n.rng.Shuffle(len(n.queue), func(i, j int) { n.queue[i], n.queue[j] = n.queue[j], n.queue[i] })
	}
	for i, kind := range n.queue {
		var a *active
		step(n.t, "nemesis: apply "+kind, n.applyLimit(kind), func(tb testing.TB) { a = n.apply(tb, kind) })
		if a != nil {
			a.kind, a.limit = kind, n.applyLimit(kind)
			n.active = append(n.active, a)
			n.counts[kind]++
			n.queue = slices.Delete(n.queue, i, i+1)
			n.note("start  %s (%s) for %.1fs", kind, a.what, time.Until(a.until).Seconds())
			return
		}
	}
}

// applyLimit is how long applying or healing a fault of kind may take
// before the suite calls it stuck.
func (n *nemesis) applyLimit(kind string) time.Duration {
	if n.c.ha != nil && (kind == faultRedisRestart || kind == faultRedisOOM || kind == faultRedisFailover) {
		return redisHALimit
	}
	switch kind {
	case faultCrashPoints, faultClockSkew:
		return procStepLimit
	case faultEtcdMember, faultEtcdQuorum:
		return max(etcdStopLimit, etcdStartLimit)
	case faultRedisRestart:
		return redisStepLimit
	case faultPoisonTopic, faultPoisonLarge:
		return 10 * time.Second // up to two daemons, 3 s each
	}
	return closeLimit
}

// apply starts one fault of kind, or returns nil when it cannot now. It
// runs under n.applyLimit(kind) with tb standing in for the test (see step).
func (n *nemesis) apply(tb testing.TB, kind string) *active {
	c := n.c
	now := time.Now()
	ttl := c.cfg.SessionTTL
	switch kind {
	case faultKill:
		p := n.pick(daemonRole, eventRole, workRole)
		if p == nil {
			return nil
		}
		down := n.between(200*time.Millisecond, 3*time.Second)
		if !p.kill(down) {
			return nil
		}
		return &active{what: p.name, uses: []string{p.name}, until: now.Add(down)}

	case faultCrashPoints:
		p := n.pick(eventRole, workRole, daemonRole)
		if p == nil {
			return nil
		}
		spec := eventCrashPoints
		switch p.role {
		case workRole:
			spec = workCrashPoints
		case daemonRole:
			spec = daemonCrashPoints
		}
		restart(tb, p, map[string]string{"DQ_FAULT_CRASH": spec})
		return &active{what: p.name + " " + spec, uses: []string{p.name}, until: time.Now().Add(n.between(8*time.Second, 15*time.Second)),
			heal: func(tb testing.TB) { restart(tb, p, nil) }}

	case faultPause:
		p, _, led := c.topLeader(func(p *proc) bool { return !n.busy(p.name) })
		if p == nil || !p.pause() {
			return nil
		}
		return &active{what: fmt.Sprintf("%s leading %d shards", p.name, led), uses: []string{p.name},
			until: now.Add(ttl + n.between(500*time.Millisecond, 2500*time.Millisecond)), heal: func(testing.TB) { p.resume() }}

	case faultPartRedis, faultPartEtcd:
		p := n.pick(daemonRole, eventRole, workRole)
		if p == nil {
			return nil
		}
		mode := testenv.Hold
		if n.rng.IntN(2) == 0 {
			mode = testenv.Reset
		}
		l := n.c.links[p]
		pxs := []*testenv.Proxy{l.redis}
		if kind == faultPartEtcd {
			pxs = l.etcd
		}
		for _, px := range pxs {
			px.Partition(mode)
		}
		return &active{what: fmt.Sprintf("%s, %s", p.name, mode), uses: []string{p.name},
			until: now.Add(n.between(2*time.Second, 6*time.Second)), heal: func(testing.TB) {
				for _, px := range pxs {
					px.Heal()
				}
			}}

	case faultLeaseRevoke:
		if n.busy("etcd") {
			return nil
		}
		p, lease, led := c.topLeader(func(p *proc) bool { return !n.busy(p.name) })
		if p == nil || lease == 0 {
			return nil
		}
		heal, err := c.cutAndRevoke(p, lease)
		if err != nil {
			return nil
		}
		return &active{what: fmt.Sprintf("%s leading %d shards", p.name, led), uses: []string{p.name, "etcd"},
			until: now.Add(ttl + n.between(0, time.Second)), heal: func(testing.TB) { heal() }}

	case faultEtcdMember:
		if n.busy("etcd") || len(c.etcd.Members) < 3 {
			return nil
		}
		i := n.rng.IntN(len(c.etcd.Members))
		c.etcd.Members[i].Stop(tb)
		return &active{what: fmt.Sprintf("member %d stopped", i), uses: []string{"etcd"},
			until: time.Now().Add(n.between(3*time.Second, 8*time.Second)), heal: func(tb testing.TB) { c.etcd.Members[i].Restart(tb) }}

	case faultEtcdQuorum:
		if n.busy("etcd") || len(c.etcd.Members) < 3 {
			return nil
		}
		idx := n.rng.Perm(len(c.etcd.Members))[:2]
		for _, i := range idx {
			c.etcd.Members[i].Stop(tb)
		}
		return &active{what: fmt.Sprintf("members %v stopped", idx), uses: []string{"etcd"},
			until: time.Now().Add(n.between(3*time.Second, 6*time.Second)), heal: func(tb testing.TB) { c.etcd.Restart(tb, idx...) }}

	case faultRedisFailover:
		if n.busy("redis") {
			return nil
		}
		lag := n.between(500*time.Millisecond, 2*time.Second)
		old, nw, what := c.ha.failover(tb, n.rng.IntN, lag)
		return &active{what: what, uses: []string{"redis"},
			until: time.Now().Add(n.between(500*time.Millisecond, 3*time.Second)), heal: func(tb testing.TB) { c.ha.rejoin(tb, old, nw) }}

	case faultRedisRestart:
		if n.busy("redis") {
			return nil
		}
		if c.ha != nil {
			// down 1-5s: the replica is promoted about 3-4s after the
			// kill, so some restarts come first and some after
			old, what := c.ha.killMaster(tb, n.rng.IntN)
			return &active{what: what, uses: []string{"redis"},
				until: time.Now().Add(n.between(time.Second, 5*time.Second)), heal: func(tb testing.TB) { c.ha.restartMaster(tb, old) }}
		}
		c.redis.Kill(tb)
		return &active{what: "redis-server down", uses: []string{"redis"},
			until: time.Now().Add(n.between(500*time.Millisecond, 3*time.Second)), heal: func(tb testing.TB) { c.redis.Restart(tb) }}

	case faultRedisOOM:
		// Redis refuses every write (noeviction, maxmemory below what it
		// holds) for a while: schedules are journaled, fires, claims and
		// outcomes wait and retry; nothing may turn into poison or bad
		// input.
		if n.busy("redis") {
			return nil
		}
		if c.ha != nil {
			what := c.ha.oom(tb)
			return &active{what: what, uses: []string{"redis"},
				until: now.Add(n.between(2*time.Second, 5*time.Second)), heal: func(tb testing.TB) { c.ha.oomHeal(tb) }}
		}
		rdb := n.rdb
		if err := rdb.ConfigSet(tb.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
			tb.Fatalf("chaos: maxmemory-policy: %v", err)
		}
		if err := rdb.ConfigSet(tb.Context(), "maxmemory", "1").Err(); err != nil {
			tb.Fatalf("chaos: maxmemory: %v", err)
		}
		return &active{what: "every write refused with OOM", uses: []string{"redis"},
			until: now.Add(n.between(2*time.Second, 5*time.Second)), heal: func(tb testing.TB) {
				if err := rdb.ConfigSet(tb.Context(), "maxmemory", "0").Err(); err != nil {
					tb.Fatalf("chaos: maxmemory back to 0: %v", err)
				}
			}}

	case faultPoisonTopic, faultPoisonLarge:
		pk := poisonMissingTopic
		if kind == faultPoisonLarge {
			pk = poisonOversized
		}
		p, accepted := c.schedulePoison(pk, len(n.poison.snapshot()))
		if !accepted {
			return nil
		}
		n.poison.add(p)
		return &active{what: fmt.Sprintf("%s to %s (%d)", p.id, p.topic, p.status), until: now.Add(time.Second)}

	case faultKafkaErrors:
		if n.busy("kafka-errors") {
			return nil
		}
		errs := []*kerr.Error{kerr.NotLeaderForPartition, kerr.RequestTimedOut, kerr.NotEnoughReplicas, kerr.UnknownServerError}
		e := errs[n.rng.IntN(len(errs))]
		c.kf.produceErrors(e)
		return &active{what: e.Message, uses: []string{"kafka-errors"},
			until: now.Add(n.between(2*time.Second, 5*time.Second)), heal: func(testing.TB) { c.kf.healErrors() }}

	case faultKafkaSlow:
		if n.busy("kafka-slow") {
			return nil
		}
		d := n.between(300*time.Millisecond, 2*time.Second).Round(10 * time.Millisecond)
		c.kf.setSlow(d, false)
		return &active{what: "every answer " + d.String() + " late", uses: []string{"kafka-slow"},
			until: now.Add(n.between(3*time.Second, 6*time.Second)), heal: func(testing.TB) { c.kf.setSlow(0, false) }}

	case faultClockSkew:
		p := n.pick(daemonRole, eventRole, workRole)
		if p == nil {
			return nil
		}
		skew := n.between(time.Second, 5*time.Second).Round(100 * time.Millisecond)
		if n.rng.IntN(2) == 0 {
			skew = -skew
		}
		restart(tb, p, map[string]string{"DQ_FAULT_CLOCK_SKEW": skew.String()})
		return &active{what: fmt.Sprintf("%s %+v", p.name, skew), uses: []string{p.name},
			until: time.Now().Add(n.between(8*time.Second, 15*time.Second)), heal: func(tb testing.TB) { restart(tb, p, nil) }}
	}
	panic("unknown fault kind " + kind)
}

// cutAndRevoke holds p's etcd links, then revokes its session lease: the
// others see its keys vanish and take over its shards at once, while p,
// cut off, does not learn of it and goes on believing it leads until its
// own lease bookkeeping says otherwise (the situation of a leader whose
// lease ended early on the server). Only the fence stops its writes. The
// returned func heals the links.
func (c *cluster) cutAndRevoke(p *proc, lease clientv3.LeaseID) (func(), error) {
	for _, px := range c.links[p].etcd {
		px.Partition(testenv.Hold)
	}
	heal := func() {
		for _, px := range c.links[p].etcd {
			px.Heal()
		}
	}
	ctx, cancel := context.WithTimeout(c.t.Context(), 2*time.Second)
	defer cancel()
	if _, err := c.etcdc.Revoke(ctx, lease); err != nil {
		heal()
		return nil, fmt.Errorf("revoke lease of %s: %w", p.name, err)
	}
	return heal, nil
}

// restore undoes what faults left behind: processes armed with fault
// settings run clean again, paused ones continue, every link and kfake
// forward again, every process is healthy. Each step runs under a time
// limit.
func (c *cluster) restore(timeout time.Duration) {
	c.t.Helper()
	for _, p := range c.procs {
		p.resume()
		if p.hasExtra() {
			step(c.t, "restore: restart "+p.name+" without fault settings", procStepLimit, func(tb testing.TB) { restart(tb, p, nil) })
		}
	}
	for _, l := range c.links {
		for _, px := range l.all() {
			px.Heal()
		}
	}
	c.kf.setSlow(0, false)
	c.kf.healErrors()
	setDoing(c.t, "restore: waiting for every process to be healthy")
	c.waitHealthy(timeout)
}

// crashCounts sums the fault-injection crashes and fence refusals the
// processes logged.
func (c *cluster) crashCounts() (map[string]int, int) {
	out := map[string]int{}
	fenced := 0
	for _, p := range c.procs {
		cr, f := p.out.counts()
		for k, v := range cr {
			out[k] += v
		}
		fenced += f
	}
	return out, fenced
}

func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
