package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// redisMode is the Redis a run's delayq stores its tasks in.
type redisMode string

const (
	// redisSingle: one redis-server (AOF always), each process behind a
	// proxy of its own.
	redisSingle redisMode = "single"
	// redisClusterMode: a Redis Cluster of 3 masters with one replica
	// each (AOF always, cluster-node-timeout 2s), every binary given
	// every node's address and DQ_REDIS_REPLICA_ACKS. No proxies: a
	// cluster client dials the addresses CLUSTER SLOTS names.
	redisClusterMode redisMode = "cluster"
)

// clusterMasters is the number of masters (each with one replica) in
// cluster mode.
const clusterMasters = 3

// Limits of the cluster-mode Redis steps.
const (
	promoteLimit   = 30 * time.Second // kill of a master to its replica serving
	stableLimit    = 30 * time.Second // every node agrees, no failure flag, every master's replica linked
	redisHALimit   = 90 * time.Second // one cluster Redis fault's apply or heal (the steps above in a row)
	redisNodeLimit = 15 * time.Second // one node's PING, CONFIG SET, INFO
)

// redisModeFromEnv reads DQ_CHAOS_REDIS (default single).
func redisModeFromEnv(t *testing.T) redisMode {
	t.Helper()
	switch v := os.Getenv("DQ_CHAOS_REDIS"); v {
	case "", string(redisSingle):
		return redisSingle
	case string(redisClusterMode):
		return redisClusterMode
	default:
		t.Fatalf("DQ_CHAOS_REDIS %q: want %q or %q", v, redisSingle, redisClusterMode)
	}
	return ""
}

// replicaAcksFromEnv reads DQ_CHAOS_REPLICA_ACKS, the binaries'
// DQ_REDIS_REPLICA_ACKS in cluster mode (default 1; 0 shows what the
// failover loses without it).
func replicaAcksFromEnv(t *testing.T) int {
	t.Helper()
	v := os.Getenv("DQ_CHAOS_REPLICA_ACKS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1 {
		t.Fatalf("DQ_CHAOS_REPLICA_ACKS %q: want 0 or 1 (each master has one replica)", v)
	}
	return n
}

// haRedis is a run's Redis Cluster with replicas, with a client per node
// (straight to the node, as the nemesis' admin connection).
//
// The suite reads the cluster's shape from the nodes themselves
// (topology): testenv records the masters and replicas the cluster was
// created with and each promotion WaitPromoted saw, but not the old
// master that rejoins as the new master's replica, so
// testenv.CutReplication refuses the second failover of a pair. cut does
// what CutReplication does, for the replica the nodes report.
type haRedis struct {
	rc      *testenv.RedisCluster
	clients map[string]*redis.Client // by node address
	byAddr  map[string]*testenv.Redis
	// figures for the summary
	promotions []time.Duration // kill to promotion, failover faults
	restarts   int             // master kill+restart faults healed
	promoted   int             // of those, how many ended with the replica promoted
	learned    int             // promotions testenv had not seen (a restart's, or a node flagged failing under load)
}

func startHARedis(t *testing.T) *haRedis {
	t.Helper()
	// appendfsync always: the kill+restart fault restarts some masters
	// before their replica is promoted, and such a master comes back with
	// what its AOF holds, its replica resyncing to it. With everysec Redis
	// postpones AOF writes while a background fsync runs (up to 2 s) and
	// answers meanwhile, so a loaded machine lost writes the replica had
	// confirmed (12 journal replays of one run, WAIT 1 answered 1): the
	// loss DQ_REDIS_REPLICA_ACKS cannot prevent on Redis 7.0, which the
	// daemon and work processes warn of (PersistenceAdvice). On Redis 7.2
	// DQ_REDIS_WAIT_AOF covers the primary's AOF with everysec.
	// Its AOF on tmpfs (MemDir): six servers fsyncing every write loaded
	// the disk the integration suite's servers share when the packages ran
	// at once; a kill -9 loses nothing the server wrote either way.
	rc := testenv.StartRedisClusterReplicas(t, clusterMasters, testenv.RedisOptions{AOF: true, AppendFsync: "always", MemDir: true})
	h := &haRedis{rc: rc, clients: map[string]*redis.Client{}, byAddr: map[string]*testenv.Redis{}}
	for _, r := range rc.Nodes {
		h.clients[r.Addr] = r.Client(t)
		h.byAddr[r.Addr] = r
	}
	return h
}

// topology is the cluster as every node reports it, once stable.
type topology struct {
	masters []string            // addresses of the masters, in slot order
	slots   map[string][][2]int // master -> its slot ranges
	replica map[string]string   // master -> its replica
}

// ownerOf is the master serving slot.
func (tp topology) ownerOf(slot int) string {
	for m, rs := range tp.slots {
		for _, r := range rs {
			if slot >= r[0] && slot <= r[1] {
				return m
			}
		}
	}
	return ""
}

// clusterLine is one line of CLUSTER NODES.
type clusterLine struct {
	id, addr, flags, masterID, link string
	slots                           [][2]int
}

func parseClusterNodes(s string) ([]clusterLine, error) {
	var out []clusterLine
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", strings.TrimSpace(line))
		}
		addr, _, _ := strings.Cut(f[1], "@")
		l := clusterLine{id: f[0], addr: addr, flags: f[2], masterID: f[3], link: f[7]}
		slots, err := testenv.ParseSlotRanges(f[8:])
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES: %w", err)
		}
		l.slots = slots
		out = append(out, l)
	}
	return out, nil
}

// readTopology returns the cluster's shape if it is stable: every node
// answers and reports cluster_state:ok, no node sees another flagged
// failing (fail, fail?), in handshake or disconnected, all nodes agree on
// who serves which slots and who replicates whom, there are
// clusterMasters masters, each with exactly one replica, and each
// replica's link to its master is up. Otherwise it says why not.
func (h *haRedis) readTopology(ctx context.Context) (topology, string) {
	var view string
	var lines []clusterLine
	for _, r := range h.rc.Nodes {
		cl := h.clients[r.Addr]
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := cl.ClusterInfo(cctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = errors.New("not cluster_state:ok")
		}
		var nodes string
		if err == nil {
			nodes, err = cl.ClusterNodes(cctx).Result()
		}
		cancel()
		if err != nil {
			return topology{}, fmt.Sprintf("%s: %v", r.Addr, err)
		}
		ls, err := parseClusterNodes(nodes)
		if err != nil {
			return topology{}, fmt.Sprintf("%s: %v", r.Addr, err)
		}
		idAddr := map[string]string{}
		for _, l := range ls {
			idAddr[l.id] = l.addr
		}
		var parts []string
		for _, l := range ls {
			for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if slices.Contains(strings.Split(l.flags, ","), bad) {
					return topology{}, fmt.Sprintf("%s sees %s %s", r.Addr, l.addr, l.flags)
				}
			}
			if l.link != "connected" {
				return topology{}, fmt.Sprintf("%s sees %s %s", r.Addr, l.addr, l.link)
			}
			if l.masterID != "-" {
				parts = append(parts, fmt.Sprintf("%s>%s", l.addr, idAddr[l.masterID]))
			} else {
				parts = append(parts, fmt.Sprintf("%s%v", l.addr, l.slots))
			}
		}
		slices.Sort(parts)
		v := strings.Join(parts, " ")
		switch {
		case view == "":
			view, lines = v, ls
		case v != view:
			return topology{}, fmt.Sprintf("the nodes disagree: %s vs %s", view, v)
		}
	}
	tp := topology{slots: map[string][][2]int{}, replica: map[string]string{}}
	idAddr := map[string]string{}
	for _, l := range lines {
		idAddr[l.id] = l.addr
	}
	for _, l := range lines {
		switch {
		case l.masterID == "-" && len(l.slots) > 0:
			tp.masters = append(tp.masters, l.addr)
			tp.slots[l.addr] = l.slots
		case l.masterID != "-":
			m := idAddr[l.masterID]
			if tp.replica[m] != "" {
				return topology{}, fmt.Sprintf("%s has two replicas, %s and %s", m, tp.replica[m], l.addr)
			}
			tp.replica[m] = l.addr
		default:
			return topology{}, fmt.Sprintf("%s is a master without slots", l.addr)
		}
	}
	slices.SortFunc(tp.masters, func(a, b string) int { return tp.slots[a][0][0] - tp.slots[b][0][0] })
	if len(tp.masters) != clusterMasters {
		return topology{}, fmt.Sprintf("%d masters %v, want %d", len(tp.masters), tp.masters, clusterMasters)
	}
	for _, m := range tp.masters {
		rep := tp.replica[m]
		if rep == "" {
			return topology{}, fmt.Sprintf("master %s has no replica", m)
		}
		info, err := h.replication(ctx, rep)
		if err != nil {
			return topology{}, err.Error()
		}
		if info["master_link_status"] != "up" || info["master_host"]+":"+info["master_port"] != m {
			return topology{}, fmt.Sprintf("replica %s of %s: master %s:%s, link %s",
				rep, m, info["master_host"], info["master_port"], info["master_link_status"])
		}
	}
	return tp, ""
}

// replication is INFO replication of the node at addr, as fields.
func (h *haRedis) replication(ctx context.Context, addr string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := h.clients[addr].Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO replication on %s: %w", addr, err)
	}
	out := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// waitStable polls readTopology until the cluster is stable and ok
// accepts it, at most stableLimit; past it it fails tb naming what.
func (h *haRedis) waitStable(tb testing.TB, what string, ok func(topology) string) topology {
	tb.Helper()
	deadline := time.Now().Add(stableLimit)
	last := ""
	for {
		tp, why := h.readTopology(tb.Context())
		if why == "" && ok != nil {
			why = ok(tp)
		}
		if why == "" {
			return tp
		}
		last = why
		if time.Now().After(deadline) {
			tb.Fatalf("chaos: %s: the Redis cluster not stable within %v: %s", what, stableLimit, last)
		}
		time.Sleep(100 * time.Millisecond) // poll of a bounded wait
	}
}

// learnPromotions tells testenv of every promotion it has not seen (a
// master replaced while the kill+restart fault had it down, or a node
// flagged failing on a loaded machine), so that KillMaster and
// WaitPromoted work on the masters tp names. It returns how many it
// told.
func (h *haRedis) learnPromotions(tb testing.TB, tp topology) int {
	tb.Helper()
	n := 0
	for _, m := range h.rc.Masters() {
		rs := h.rc.SlotRanges(m)
		if len(rs) == 0 || tp.ownerOf(rs[0][0]) == m.Addr {
			continue
		}
		ctx, cancel := context.WithTimeout(tb.Context(), promoteLimit)
		_, _, err := h.rc.WaitPromoted(ctx, m)
		cancel()
		if err != nil {
			tb.Fatalf("chaos: testenv does not see %s's slots served by %s: %v", m.Addr, tp.ownerOf(rs[0][0]), err)
		}
		n++
	}
	return n
}

// cut stops the replication of master to its replica rep (both
// addresses) as testenv.CutReplication does: the replica gets a
// masterauth master refuses, the master drops its replica connections,
// and cut waits until the replica reports its link down and the master no
// replica. The replica stays up, in the cluster and electable
// (cluster-replica-validity-factor 0); what master acknowledges from now
// on never reaches it. A replica killed and restarted by the suite starts
// with its original settings again.
func (h *haRedis) cut(tb testing.TB, master, rep string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), redisNodeLimit)
	defer cancel()
	if err := h.clients[rep].ConfigSet(ctx, "masterauth", fmt.Sprintf("chaos-cut-%d", time.Now().UnixNano())).Err(); err != nil {
		tb.Fatalf("chaos: cut replication: CONFIG SET masterauth on the replica %s: %v", rep, err)
	}
	if err := h.clients[master].Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		tb.Fatalf("chaos: cut replication: CLIENT KILL TYPE replica on %s: %v", master, err)
	}
	last := ""
	for {
		ri, err1 := h.replication(ctx, rep)
		mi, err2 := h.replication(ctx, master)
		switch {
		case err1 != nil:
			last = err1.Error()
		case err2 != nil:
			last = err2.Error()
		case ri["master_link_status"] == "down" && mi["connected_slaves"] == "0":
			return
		default:
			last = fmt.Sprintf("replica master_link_status:%s, master connected_slaves:%s", ri["master_link_status"], mi["connected_slaves"])
		}
		if ctx.Err() != nil {
			tb.Fatalf("chaos: cut replication of %s from %s: not cut within %v: %s", rep, master, redisNodeLimit, last)
		}
		time.Sleep(50 * time.Millisecond) // poll of a bounded wait
	}
}

// failover applies the primary failover: a master picked with pick (an
// index into the masters in slot order) is cut from its replica, writes
// go on for lag, the master is SIGKILLed and its replica, behind by those
// writes, must be promoted within promoteLimit. It returns the old master
// and the new one.
func (h *haRedis) failover(tb testing.TB, pick func(n int) int, lag time.Duration) (old, nw *testenv.Redis, desc string) {
	tb.Helper()
	tp := h.waitStable(tb, "before the failover", nil)
	h.learned += h.learnPromotions(tb, tp)
	m := tp.masters[pick(len(tp.masters))]
	rep := tp.replica[m]
	old = h.byAddr[m]
	h.cut(tb, m, rep)
	time.Sleep(lag) // the workload writes to the master meanwhile: its replica never gets those writes
	h.rc.KillMaster(tb, old)
	ctx, cancel := context.WithTimeout(tb.Context(), promoteLimit)
	defer cancel()
	nw, took, err := h.rc.WaitPromoted(ctx, old)
	if err != nil {
		tb.Fatalf("chaos: failover of %s: step \"wait for the promotion\": no replica promoted within %v: %v", m, promoteLimit, err)
	}
	if nw.Addr != rep {
		tb.Fatalf("chaos: failover of %s: %s promoted, not its replica %s", m, nw.Addr, rep)
	}
	h.promotions = append(h.promotions, took)
	return old, nw, fmt.Sprintf("master %s (slots %v) cut from %s, killed %.1fs later; %s promoted %.1fs after the kill",
		m, tp.slots[m], rep, lag.Seconds(), rep, took.Seconds())
}

// rejoin restarts the old master of a failover and waits until it
// replicates the new one with its link up, so that the pair can fail over
// again.
func (h *haRedis) rejoin(tb testing.TB, old, nw *testenv.Redis) {
	tb.Helper()
	old.Restart(tb)
	h.waitStable(tb, "after restarting "+old.Addr, func(tp topology) string {
		if tp.replica[nw.Addr] != old.Addr {
			return fmt.Sprintf("%s's replica is %q, not the restarted old master %s", nw.Addr, tp.replica[nw.Addr], old.Addr)
		}
		return ""
	})
}

// killMaster is the cluster's kill -9 + restart: a master picked with
// pick is SIGKILLed with its replication link intact (its replica gets
// every write the kernel had buffered); the heal restarts it. Down for
// less than the node timeout it comes back as the master; longer, its
// replica may have been promoted and it rejoins as a replica.
func (h *haRedis) killMaster(tb testing.TB, pick func(n int) int) (*testenv.Redis, string) {
	tb.Helper()
	tp := h.waitStable(tb, "before the kill of a master", nil)
	h.learned += h.learnPromotions(tb, tp)
	m := tp.masters[pick(len(tp.masters))]
	old := h.byAddr[m]
	h.rc.KillMaster(tb, old)
	return old, fmt.Sprintf("master %s (slots %v, replica %s) down", m, tp.slots[m], tp.replica[m])
}

// restartMaster is killMaster's heal.
func (h *haRedis) restartMaster(tb testing.TB, old *testenv.Redis) {
	tb.Helper()
	slots := h.rc.SlotRanges(old)
	old.Restart(tb)
	tp := h.waitStable(tb, "after restarting "+old.Addr, nil)
	h.restarts++
	if len(slots) > 0 && tp.ownerOf(slots[0][0]) != old.Addr {
		h.promoted++
		h.learnPromotions(tb, tp)
	}
}

// oom makes every master refuse writes (maxmemory 1, noeviction).
func (h *haRedis) oom(tb testing.TB) string {
	tb.Helper()
	tp := h.waitStable(tb, "before the OOM", nil)
	for _, m := range tp.masters {
		if err := h.configSet(tb, m, "maxmemory", "1"); err != nil {
			tb.Fatalf("chaos: maxmemory on %s: %v", m, err)
		}
	}
	return fmt.Sprintf("every write refused with OOM on the masters %v", tp.masters)
}

// oomHeal sets maxmemory back to 0 on every node.
func (h *haRedis) oomHeal(tb testing.TB) {
	tb.Helper()
	for _, addr := range slices.Sorted(maps.Keys(h.clients)) {
		if err := h.configSet(tb, addr, "maxmemory", "0"); err != nil {
			tb.Fatalf("chaos: maxmemory back to 0 on %s: %v", addr, err)
		}
	}
}

func (h *haRedis) configSet(tb testing.TB, addr, k, v string) error {
	ctx, cancel := context.WithTimeout(tb.Context(), redisNodeLimit)
	defer cancel()
	return h.clients[addr].ConfigSet(ctx, k, v).Err()
}

// killAll kills every node (teardown).
func (h *haRedis) killAll(tb testing.TB) {
	for _, r := range h.rc.Nodes {
		r.Kill(tb)
	}
}

// summaryLine is the cluster's figures for the run's summary.
func (h *haRedis) summaryLine() string {
	took := "-"
	if len(h.promotions) > 0 {
		ms := make([]int64, len(h.promotions))
		for i, d := range h.promotions {
			ms[i] = d.Milliseconds()
		}
		took = fmt.Sprintf("%dms / %dms / %dms", percentile(ms, 0), percentile(ms, 50), percentile(ms, 100))
	}
	return fmt.Sprintf("replica promoted after the kill min/p50/max %s (%d failovers); master kill+restarts healed %d, "+
		"%d of them with the replica promoted; promotions nobody asked for %d",
		took, len(h.promotions), h.restarts, h.promoted, h.learned)
}
