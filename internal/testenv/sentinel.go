package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelCount is the number of sentinels of a SentinelSet; with a quorum
// of 2 one can be lost.
const sentinelCount = 3

// SentinelSet is a primary redis-server with replicas, watched by three
// Redis Sentinels, all child processes on free loopback ports.
type SentinelSet struct {
	// MasterName is the name the sentinels monitor the primary under.
	MasterName string
	// SentinelAddrs are the sentinels' "127.0.0.1:port" addresses.
	SentinelAddrs []string
	// Sentinels are the sentinel processes, in SentinelAddrs order.
	Sentinels []*Redis

	opts RedisOptions // of the data nodes

	mu      sync.Mutex
	primary *Redis
	nodes   []*Redis  // the data nodes, the first primary at first
	changed time.Time // the last KillPrimary or DemoteInPlace
}

// StartSentinel starts a primary and replicas replicas of it (REPLICAOF)
// with StartRedis' settings (see redisBaseArgs) and repl-diskless-sync-delay
// 0, and three sentinels (redis-server <conf> --sentinel) that monitor it
// as MasterName with quorum 2, down-after-milliseconds 2000 and
// failover-timeout 5000: a dead primary is replaced within a few seconds.
// Not 1000: a sentinel that learns of a new primary from another's hello
// reconnects at most once a second (its reconnect period, counted from
// its last try at the dead primary), so with 1000 its first PONG can come
// after down-after; it then judged the new primary down and, the other
// sentinels' "down" answers about the old one still counting for 5 s,
// failed it over too (seen twice in 22 runs of
// TestRedisSentinelFailover/kill).
// It waits until every replica's link is up and every sentinel knows the
// replicas and the two other sentinels. Everything is killed at cleanup.
//
// At most one RedisOptions is used. It applies to the data nodes (the
// replicas log in to the primary, the sentinels to every node, as testenv
// does: RedisAdminUser with Users, the Password otherwise). The sentinels
// take TLS (they listen on TLS only and reach the nodes and each other
// over TLS) and Password (requirepass, also between sentinels) from it,
// not Users.
func StartSentinel(tb testing.TB, replicas int, opts ...RedisOptions) *SentinelSet {
	tb.Helper()
	if replicas < 1 {
		tb.Fatalf("testenv: StartSentinel: %d replicas, want at least 1 (a failover promotes one)", replicas)
	}
	s := &SentinelSet{MasterName: "dq-primary"}
	if len(opts) > 0 {
		s.opts = opts[0]
	}
	adminPassword := randomSecret()
	s.primary = s.startData(tb, adminPassword, nil)
	for range replicas {
		s.startData(tb, adminPassword, s.primary)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 3*startTimeout)
	defer cancel()
	var last string
	if !poll(3*startTimeout, func() bool {
		for _, r := range s.nodes[1:] {
			info, err := replicationInfo(ctx, r)
			if err != nil {
				last = err.Error()
				return false
			}
			if info["master_link_status"] != "up" {
				last = fmt.Sprintf("replica %s: master_link_status:%s", r.Addr, info["master_link_status"])
				return false
			}
		}
		return true
	}) {
		tb.Fatalf("testenv: StartSentinel: replicas not in sync with %s within %v: %s", s.primary.Addr, 3*startTimeout, last)
	}

	for range sentinelCount {
		r := s.startSentinel(tb, s.primary)
		s.Sentinels = append(s.Sentinels, r)
		s.SentinelAddrs = append(s.SentinelAddrs, r.Addr)
	}
	want := map[string]string{
		"flags":               "master",
		"num-slaves":          strconv.Itoa(replicas),
		"num-other-sentinels": strconv.Itoa(sentinelCount - 1),
	}
	if !poll(3*startTimeout, func() bool {
		for _, sn := range s.Sentinels {
			m, err := s.sentinelMaster(ctx, sn)
			if err != nil {
				last = err.Error()
				return false
			}
			for k, v := range want {
				if m[k] != v {
					last = fmt.Sprintf("sentinel %s: %s = %q, want %q", sn.Addr, k, m[k], v)
					return false
				}
			}
		}
		return true
	}) {
		tb.Fatalf("testenv: StartSentinel: sentinels %v not ready within %v: %s", s.SentinelAddrs, 3*startTimeout, last)
	}
	return s
}

// startData starts one data node, a replica of of unless that is nil.
func (s *SentinelSet) startData(tb testing.TB, adminPassword string, of *Redis) *Redis {
	tb.Helper()
	r := &Redis{Dir: redisDir(tb, s.opts), opts: s.opts}
	r.secure(tb, adminPassword)
	r.start(tb, func(port int) []string {
		args := append(redisBaseArgs(port, r.Dir, s.opts), "--repl-diskless-sync-delay", "0")
		args = append(args, replicationAuthArgs(r)...)
		if s.opts.TLS != nil {
			args = append(args, "--tls-replication", "yes")
		}
		if of != nil {
			host, port, _ := net.SplitHostPort(of.Addr)
			args = append(args, "--replicaof", host, port)
		}
		return args
	})
	s.nodes = append(s.nodes, r)
	return r
}

// startSentinel starts one sentinel monitoring primary, its configuration
// (which it rewrites as it learns) in its own temp dir.
func (s *SentinelSet) startSentinel(tb testing.TB, primary *Redis) *Redis {
	tb.Helper()
	r := &Redis{Dir: tb.TempDir(), opts: RedisOptions{TLS: s.opts.TLS, Password: s.opts.Password}}
	r.secure(tb, "")
	host, pport, _ := net.SplitHostPort(primary.Addr)
	conf := filepath.Join(r.Dir, "sentinel.conf")
	r.start(tb, func(port int) []string {
		var b strings.Builder
		line := func(words ...string) { b.WriteString(strings.Join(words, " ") + "\n") }
		if t := s.opts.TLS; t != nil {
			line("port", "0")
			line("tls-port", strconv.Itoa(port))
			line("tls-cert-file", t.Server.Cert)
			line("tls-key-file", t.Server.Key)
			line("tls-ca-cert-file", t.Server.CA)
			line("tls-auth-clients", "yes")
			line("tls-replication", "yes") // to the nodes and the other sentinels
		} else {
			line("port", strconv.Itoa(port))
		}
		line("bind", "127.0.0.1")
		line("protected-mode", "no")
		line("daemonize", "no")
		line("dir", r.Dir)
		if s.opts.Password != "" {
			line("requirepass", s.opts.Password)
		}
		name := s.MasterName
		line("sentinel", "monitor", name, host, pport, "2")
		line("sentinel", "down-after-milliseconds", name, "2000")
		line("sentinel", "failover-timeout", name, "5000")
		line("sentinel", "parallel-syncs", name, "1")
		if primary.adminUser != "" {
			line("sentinel", "auth-user", name, primary.adminUser)
		}
		if primary.adminPassword != "" {
			line("sentinel", "auth-pass", name, primary.adminPassword)
		}
		if s.opts.Password != "" {
			line("sentinel", "sentinel-pass", s.opts.Password)
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
			tb.Fatalf("testenv: write %s: %v", conf, err)
		}
		return []string{conf, "--sentinel"}
	})
	return r
}

// sentinelClient is testenv's own client of sentinel sn.
// sentinelClients is a client of each sentinel, and a func closing them.
func (s *SentinelSet) sentinelClients() ([]*redis.SentinelClient, func()) {
	clients := make([]*redis.SentinelClient, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		clients[i] = sentinelClient(sn)
	}
	return clients, func() {
		for _, sc := range clients {
			_ = sc.Close()
		}
	}
}

// namedPrimary is the address every sentinel names as the primary, or ""
// and why not (a sentinel that does not answer, two that disagree).
func (s *SentinelSet) namedPrimary(ctx context.Context, clients []*redis.SentinelClient) (addr, why string) {
	for i, sc := range clients {
		hp, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err != nil || len(hp) != 2 {
			return "", fmt.Sprintf("sentinel %s: %v %v", s.SentinelAddrs[i], hp, err)
		}
		a := net.JoinHostPort(hp[0], hp[1])
		if addr != "" && a != addr {
			return "", fmt.Sprintf("sentinels name %s and %s", addr, a)
		}
		addr = a
	}
	return addr, ""
}

func sentinelClient(sn *Redis) *redis.SentinelClient {
	return redis.NewSentinelClient(sn.adminOptions())
}

// sentinelMaster is SENTINEL MASTER of MasterName on sn.
func (s *SentinelSet) sentinelMaster(ctx context.Context, sn *Redis) (map[string]string, error) {
	sc := sentinelClient(sn)
	defer sc.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := sc.Master(ctx, s.MasterName).Result()
	if err != nil {
		return nil, fmt.Errorf("SENTINEL MASTER %s on %s: %w", s.MasterName, sn.Addr, err)
	}
	return m, nil
}

// Primary is the primary as testenv last saw it: the first started, then
// the node WaitSwitched or DemoteInPlace returned.
func (s *SentinelSet) Primary() *Redis {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// Replicas are the running data nodes but Primary.
func (s *SentinelSet) Replicas() []*Redis {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Redis
	for _, r := range s.nodes {
		if r != s.primary && r.running() {
			out = append(out, r)
		}
	}
	return out
}

// KillPrimary kills Primary with SIGKILL (a crash) and notes the instant,
// from which WaitSwitched measures the failover.
func (s *SentinelSet) KillPrimary(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	p := s.primary
	s.changed = time.Now()
	s.mu.Unlock()
	p.Kill(tb)
}

// WaitSwitched waits until every sentinel names one same primary other
// than old (SENTINEL GET-MASTER-ADDR-BY-NAME) and that node says it is a
// master (INFO replication role:master), and returns it and the time
// since the last KillPrimary or DemoteInPlace (or since the call). It
// records it as Primary. ctx bounds the wait.
func (s *SentinelSet) WaitSwitched(ctx context.Context, old *Redis) (*Redis, time.Duration, error) {
	s.mu.Lock()
	began := s.changed
	s.mu.Unlock()
	if began.IsZero() {
		began = time.Now()
	}
	clients, closeAll := s.sentinelClients()
	defer closeAll()
	var last string
	check := func() *Redis {
		addr, why := s.namedPrimary(ctx, clients)
		if addr == "" || addr == old.Addr {
			last = cmp.Or(why, "the sentinels still name "+addr)
			return nil
		}
		i := slices.IndexFunc(s.nodes, func(r *Redis) bool { return r.Addr == addr })
		if i < 0 {
			last = fmt.Sprintf("the sentinels name %s, not a node of the set", addr)
			return nil
		}
		info, err := replicationInfo(ctx, s.nodes[i])
		if err != nil || info["role"] != "master" {
			last = fmt.Sprintf("%s: role %q %v", addr, info["role"], err)
			return nil
		}
		return s.nodes[i]
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if nw := check(); nw != nil {
			s.mu.Lock()
			s.primary = nw
			s.mu.Unlock()
			return nw, time.Since(began), nil
		}
		select {
		case <-ctx.Done():
			return nil, time.Since(began), fmt.Errorf("WaitSwitched: no primary but %s after %v: %w; last: %s",
				old.Addr, time.Since(began).Round(time.Millisecond), ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// DemoteInPlace replaces the primary while it keeps running, the way a
// managed switchover does, and returns the new primary: SENTINEL FAILOVER
// (the sentinels promote a replica and publish +switch-master), then,
// once every sentinel names the new primary, REPLICAOF <new primary> on
// the old one. Clients still connected to the old primary then get
// READONLY on writes. The REPLICAOF is testenv's own: the sentinels
// would send theirs only ~8 s later (4 hello periods), and with CLIENT
// KILL TYPE normal, which closes those clients' connections instead.
func (s *SentinelSet) DemoteInPlace(tb testing.TB) *Redis {
	tb.Helper()
	s.mu.Lock()
	old := s.primary
	s.changed = time.Now()
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	sc := sentinelClient(s.Sentinels[0])
	defer sc.Close()
	var last error
	// right after start a sentinel may not judge a replica fit yet
	// (-NOGOODSLAVE) or still be busy (-INPROG)
	if !poll(startTimeout, func() bool {
		last = sc.Failover(ctx, s.MasterName).Err()
		return last == nil
	}) {
		tb.Fatalf("testenv: DemoteInPlace: SENTINEL FAILOVER %s on %s: %v", s.MasterName, s.SentinelAddrs[0], last)
	}
	nw, _, err := s.WaitSwitched(ctx, old)
	if err != nil {
		tb.Fatalf("testenv: DemoteInPlace: %v", err)
	}
	oc := redis.NewClient(old.adminOptions())
	defer oc.Close()
	host, port, _ := net.SplitHostPort(nw.Addr)
	if err := oc.Do(ctx, "replicaof", host, port).Err(); err != nil {
		tb.Fatalf("testenv: DemoteInPlace: REPLICAOF %s on %s: %v", nw.Addr, old.Addr, err)
	}
	if !poll(startTimeout, func() bool {
		info, err := replicationInfo(ctx, old)
		if err != nil {
			last = err
			return false
		}
		if info["role"] != "slave" {
			last = errors.New("role:" + info["role"])
			return false
		}
		return true
	}) {
		tb.Fatalf("testenv: DemoteInPlace: %s not a replica within %v: %v", old.Addr, startTimeout, last)
	}
	return nw
}

// CutReplication makes every replica of Primary fall behind: once it
// returns, the writes Primary acknowledges are on no replica, while the
// replicas stay up, monitored and electable. After KillPrimary the
// sentinels promote one of them without those writes: the loss of
// RELIABILITY.md 8a, made certain. Every replica is cut because Sentinel
// promotes the replica with the highest replication offset: one kept in
// sync would win and hide the loss. How, and why not SIGKILL alone or
// SIGSTOP: RedisCluster.CutReplication (a wrong masterauth on each
// replica, CLIENT KILL TYPE replica on the primary). A cut replica cannot
// sync from any primary either until HealReplication.
func (s *SentinelSet) CutReplication(tb testing.TB) {
	tb.Helper()
	p := s.Primary()
	reps := s.Replicas()
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	for _, r := range reps {
		if err := setMasterauth(ctx, r, "cut-"+randomSecret()); err != nil {
			tb.Fatalf("testenv: CutReplication: %v", err)
		}
	}
	pc := redis.NewClient(p.adminOptions())
	defer pc.Close()
	if err := pc.Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		tb.Fatalf("testenv: CutReplication: CLIENT KILL TYPE replica on %s: %v", p.Addr, err)
	}
	var last string
	if !poll(startTimeout, func() bool {
		for _, r := range reps {
			ri, err := replicationInfo(ctx, r)
			if err != nil {
				last = err.Error()
				return false
			}
			if ri["master_link_status"] != "down" {
				last = fmt.Sprintf("replica %s: master_link_status:%s", r.Addr, ri["master_link_status"])
				return false
			}
		}
		mi, err := replicationInfo(ctx, p)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("primary connected_slaves:%s", mi["connected_slaves"])
		return mi["connected_slaves"] == "0"
	}) {
		tb.Fatalf("testenv: CutReplication of %v from %s: not cut within %v: %s", reps, p.Addr, startTimeout, last)
	}
}

// HealReplication undoes CutReplication: every running data node gets
// back the masterauth it started with, so that a replica can sync from
// whichever primary the sentinels point it to (after a failover they
// reconfigure the remaining replicas with REPLICAOF <new primary>).
func (s *SentinelSet) HealReplication(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	s.mu.Lock()
	nodes := slices.Clone(s.nodes)
	s.mu.Unlock()
	for _, r := range nodes {
		if !r.running() {
			continue
		}
		if err := setMasterauth(ctx, r, r.adminPassword); err != nil {
			tb.Fatalf("testenv: HealReplication: %v", err)
		}
	}
}

// setMasterauth is CONFIG SET masterauth on r.
func setMasterauth(ctx context.Context, r *Redis, password string) error {
	rc := redis.NewClient(r.adminOptions())
	defer rc.Close()
	if err := rc.ConfigSet(ctx, "masterauth", password).Err(); err != nil {
		return fmt.Errorf("CONFIG SET masterauth on %s: %w", r.Addr, err)
	}
	return nil
}

// WaitReplica waits until r reports itself a replica, with its link up,
// of the primary every sentinel names (INFO replication role:slave,
// master_port, master_link_status:up; SENTINEL
// GET-MASTER-ADDR-BY-NAME), as the sentinels make a restarted old
// primary after about four hello periods (~8 s), and returns how long
// that took. It records that primary as Primary: it is the sentinels',
// even after a failover testenv did not cause. ctx bounds the wait.
func (s *SentinelSet) WaitReplica(ctx context.Context, r *Redis) (time.Duration, error) {
	began := time.Now()
	clients, closeAll := s.sentinelClients()
	defer closeAll()
	var last string
	check := func() *Redis {
		addr, why := s.namedPrimary(ctx, clients)
		if addr == "" {
			last = why
			return nil
		}
		s.mu.Lock()
		var p *Redis
		if i := slices.IndexFunc(s.nodes, func(n *Redis) bool { return n.Addr == addr }); i >= 0 {
			p = s.nodes[i]
		}
		s.mu.Unlock()
		if p == nil || p == r {
			last = fmt.Sprintf("the sentinels name %s", addr)
			return nil
		}
		_, pport, _ := net.SplitHostPort(addr)
		info, err := replicationInfo(ctx, r)
		if err != nil {
			last = err.Error()
			return nil
		}
		last = fmt.Sprintf("primary %s; %s: role:%s master_port:%s master_link_status:%s", addr, r.Addr, info["role"], info["master_port"], info["master_link_status"])
		if info["role"] != "slave" || info["master_port"] != pport || info["master_link_status"] != "up" {
			return nil
		}
		return p
	}
	// a change measured in seconds: 100 ms between polls (each dials anew)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if p := check(); p != nil {
			s.mu.Lock()
			s.primary = p
			s.mu.Unlock()
			return time.Since(began), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(began), fmt.Errorf("WaitReplica: %s not a replica of the sentinels' primary after %v: %w; last: %s",
				r.Addr, time.Since(began).Round(time.Millisecond), ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// FailoverLog is what the sentinels and the data nodes logged of
// failovers, from the output testenv keeps (the last 64 KiB of each
// process since its last start): every sentinel event (+sdown, +odown,
// +try-failover, +switch-master, ...) and the nodes' role changes,
// replication links and syncs. Each line starts with who logged it
// ("sentinel 127.0.0.1:port: ", "node 127.0.0.1:port: ").
func (s *SentinelSet) FailoverLog() string {
	nodeKeys := []string{"MASTER MODE", "REPLICAOF", "MASTER <-> REPLICA", "Connecting to MASTER", "resync", "Full", "Partial",
		"Discarding previously cached", "Synchronization with replica", "Connection with master", "Connection with replica",
		"AOF fsync", "Ready to accept"}
	var b strings.Builder
	for _, sn := range s.Sentinels {
		for line := range strings.Lines(keptOutput(sn)) {
			// "<pid>:X 28 Nov 2026 19:45:40.434 # +switch-master ..."
			if f := strings.Fields(line); len(f) > 6 && (f[6][0] == '+' || f[6][0] == '-') {
				b.WriteString("sentinel " + sn.Addr + ": " + line)
			}
		}
	}
	s.mu.Lock()
	nodes := slices.Clone(s.nodes)
	s.mu.Unlock()
	for _, r := range nodes {
		for line := range strings.Lines(keptOutput(r)) {
			if slices.ContainsFunc(nodeKeys, func(k string) bool { return strings.Contains(line, k) }) {
				b.WriteString("node " + r.Addr + ": " + line)
			}
		}
	}
	return b.String()
}

// keptOutput is all of r's output testenv keeps (Output is its tail).
func keptOutput(r *Redis) string {
	r.mu.Lock()
	out := r.out
	r.mu.Unlock()
	if out == nil {
		return ""
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.buf.String()
}
