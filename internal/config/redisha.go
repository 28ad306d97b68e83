package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// A Redis primary can change under a running process: a Redis Cluster
// promotes a replica, Sentinel promotes one, or a managed endpoint demotes
// its primary in place and moves its DNS name. The client must follow at
// the speed of the promotion (RELIABILITY.md 8b); this file makes every
// client RedisClient builds do so, and says when it did.

// MetricsNamespace prefixes every delayq metric. It is defined here, the
// lowest package that exports metrics (its Redis clients do), and is
// admin.Namespace for everything above.
const MetricsNamespace = "delayq"

// clusterStateReloadInterval is how old a cluster client's slot map may
// get before a command reloads it (go-redis' default: 60 s). It costs one
// CLUSTER SLOTS per client per interval, and bounds how long a client
// that saw no error keeps a stale map (a replica added, a slot moved).
const clusterStateReloadInterval = 5 * time.Second

// defaultAckTimeout is RedisAckTimeout's default.
const defaultAckTimeout = 500 * time.Millisecond

// maxReplicaAcks bounds RedisReplicaAcks.
const maxReplicaAcks = 16

// bindRedisHA registers the Sentinel and acknowledgement settings.
func (c *Common) bindRedisHA(b *Binder) {
	b.List(&c.RedisSentinelAddrs, "redis-sentinel-addrs", "DQ_REDIS_SENTINEL_ADDRS", "",
		"Redis Sentinel addresses: the client asks them for the primary redis-sentinel-master names and follows its failovers; redis-addrs is then not used. The sentinels are dialled with the redis-sentinel-tls* settings, or the redis-tls* ones when those are unset")
	b.String(&c.RedisSentinelMaster, "redis-sentinel-master", "DQ_REDIS_SENTINEL_MASTER", "", "the primary's name in Redis Sentinel (sentinel monitor <name> ...)")
	b.String(&c.RedisSentinelUsername, "redis-sentinel-username", "DQ_REDIS_SENTINEL_USERNAME", "", "ACL user on the sentinels (empty: the default user)")
	b.Secret(&c.RedisSentinelPassword, "redis-sentinel-password", "DQ_REDIS_SENTINEL_PASSWORD", "", "password on the sentinels (of the ACL user, or requirepass)")
	b.TLS(&c.RedisSentinelTLS, "redis-sentinel", "DQ_REDIS_SENTINEL", "Redis Sentinel", true, true)
	b.Int(&c.RedisReplicaAcks, "redis-replica-acks", "DQ_REDIS_REPLICA_ACKS", 0,
		"replicas that must hold a write before it is acknowledged (Redis WAIT), 0 to 16; 0: do not wait")
	b.Duration(&c.RedisAckTimeout, "redis-ack-timeout", "DQ_REDIS_ACK_TIMEOUT", defaultAckTimeout,
		"how long a write waits for redis-replica-acks (and redis-wait-aof); past it the write's durability is unknown. Above 0, below the 3s Redis read timeout")
	b.Bool(&c.RedisWaitAOF, "redis-wait-aof", "DQ_REDIS_WAIT_AOF", false,
		"also wait (WAITAOF) until a write is in the AOF on disk of the primary and of redis-replica-acks replicas (Redis >= 7.2)")
}

// validateRedisHA checks the Sentinel and acknowledgement settings.
func (c *Common) validateRedisHA() error {
	if err := c.validateSentinel(); err != nil {
		return err
	}
	if c.RedisReplicaAcks < 0 || c.RedisReplicaAcks > maxReplicaAcks {
		return fmt.Errorf("DQ_REDIS_REPLICA_ACKS %d: between 0 and %d", c.RedisReplicaAcks, maxReplicaAcks)
	}
	// zero is accepted while nothing waits: a Common built in code
	// (dq acl) has no defaults
	waits := c.RedisReplicaAcks > 0 || c.RedisWaitAOF
	if c.RedisAckTimeout < 0 || (waits && c.RedisAckTimeout == 0) || c.RedisAckTimeout >= redisReadTimeout {
		return fmt.Errorf("DQ_REDIS_ACK_TIMEOUT %s: above 0 and below the %s Redis read timeout (a WAIT longer than it would be cut off)",
			c.RedisAckTimeout, redisReadTimeout)
	}
	return nil
}

// validateSentinel checks that the Sentinel settings go together and
// with the others.
func (c *Common) validateSentinel() error {
	sentinel := len(c.RedisSentinelAddrs) > 0
	switch {
	case sentinel && c.RedisSentinelMaster == "":
		return errors.New("DQ_REDIS_SENTINEL_ADDRS: set with DQ_REDIS_SENTINEL_MASTER (the name of the primary to ask the sentinels for)")
	case !sentinel && c.RedisSentinelMaster != "":
		return errors.New("DQ_REDIS_SENTINEL_MASTER: set with DQ_REDIS_SENTINEL_ADDRS (the sentinels to ask)")
	case !sentinel && (c.RedisSentinelUsername != "" || c.RedisSentinelPassword != "" || c.RedisSentinelTLS.On()):
		return errors.New("DQ_REDIS_SENTINEL_USERNAME, _PASSWORD, _TLS*: set with DQ_REDIS_SENTINEL_ADDRS (they are how to reach the sentinels)")
	case sentinel && c.RedisCluster:
		return errors.New("DQ_REDIS_SENTINEL_ADDRS with DQ_REDIS_CLUSTER: Sentinel watches one primary, a Redis Cluster fails over by itself; set one of them")
	case sentinel && len(c.RedisAddrs) > 1:
		return errors.New("DQ_REDIS_SENTINEL_ADDRS with several DQ_REDIS_ADDRS (a Redis Cluster): the sentinels name the primary; set one of them")
	case c.RedisSentinelUsername != "" && c.RedisSentinelPassword == "":
		return errors.New("DQ_REDIS_SENTINEL_USERNAME: set with DQ_REDIS_SENTINEL_PASSWORD (an ACL user logs in with a password)")
	}
	if _, err := c.RedisSentinelTLS.Client(); err != nil {
		return err
	}
	return nil
}

// RedisClientHA builds the Redis client of the settings (see RedisClient)
// so that it follows a failover as soon as the new primary serves, and
// returns with it the RedisHA that logs each failover it followed to log
// (nil: none) and counts it; register it with the binary's Prometheus
// registry.
//
//   - Redis Cluster: go-redis reloads its slot map only on MOVED, ASK or
//     READONLY, or once it is older than ClusterStateReloadInterval; a dead
//     master answers nothing, so the client kept dialing it for up to a
//     minute. Here every node client reloads the map (go-redis coalesces
//     the reloads, 200 ms apart) when a command fails on the connection
//     (refused, reset, EOF, a timeout) or with CLUSTERDOWN, READONLY,
//     MASTERDOWN or TRYAGAIN: while commands to the dead master keep
//     failing, the new map is read within ~200 ms of the promotion
//     (measured: 3-250 ms; go-redis' defaults: 55 s). The map is also
//     reloaded every 5 s regardless.
//   - Sentinel: go-redis asks the sentinels for the primary at every dial
//     and drops its connections to the old one on +switch-master.
//   - One address: go-redis closes a connection that answered READONLY
//     and dials again, reaching whatever the address (a DNS name) now
//     names.
func (c *Common) RedisClientHA(log *slog.Logger) (redis.UniversalClient, *RedisHA, error) {
	if err := c.validateSentinel(); err != nil {
		return nil, nil, err
	}
	tlsc, err := c.RedisTLS.Client()
	if err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(c.RedisSentinelAddrs) > 0:
		stls := tlsc
		if c.RedisSentinelTLS.On() {
			if stls, err = c.RedisSentinelTLS.Client(); err != nil {
				return nil, nil, err
			}
		}
		o := c.redisOptions(sentinelDialer(tlsc, stls, c.RedisSentinelAddrs))
		o.Addrs = slices.Clone(c.RedisSentinelAddrs)
		o.MasterName = c.RedisSentinelMaster
		o.SentinelUsername, o.SentinelPassword = c.RedisSentinelUsername, c.RedisSentinelPassword
		ha := newRedisHA(log, true)
		rdb := redis.NewFailoverClient(o.Failover())
		rdb.AddHook(primaryHook{ha})
		return rdb, ha, nil
	case c.RedisCluster || len(c.RedisAddrs) > 1:
		o := c.redisOptions(redisDialer(tlsc, "redis")).Cluster()
		o.ClusterStateReloadInterval = clusterStateReloadInterval
		ha := newRedisHA(log, false)
		cc := redis.NewClusterClient(o)
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(clusterNodeHook{ha: ha, cc: cc}) })
		return cc, ha, nil
	default:
		ha := newRedisHA(log, false)
		rdb := redis.NewClient(c.redisOptions(redisDialer(tlsc, "redis")).Simple())
		rdb.AddHook(primaryHook{ha})
		return rdb, ha, nil
	}
}

// sentinelDialer dials the sentinels (the addresses configured) with
// sentinelTLS and every other address, a data node, with dataTLS: go-redis
// gives both one Dialer and one TLS config. A sentinel the client
// discovers beyond the configured ones is dialled as a data node.
func sentinelDialer(dataTLS, sentinelTLS *tls.Config, sentinels []string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	data := redisDialer(dataTLS, "redis")
	sent := redisDialer(sentinelTLS, "redis sentinel")
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slices.Contains(sentinels, addr) {
			return sent(ctx, network, addr)
		}
		return data(ctx, network, addr)
	}
}

// RedisHA is what one client of RedisClientHA saw of failovers: it logs
// each failover it followed once and counts it in
// delayq_redis_failovers_total, and counts the slot maps a cluster client
// read in delayq_redis_slot_map_reloads_total. It is a
// prometheus.Collector.
type RedisHA struct {
	log       *slog.Logger
	sentinel  bool // a change of the primary dialled is a failover
	failovers prometheus.Counter
	reloads   prometheus.Counter

	mu       sync.Mutex
	slots    []redis.ClusterSlot // the last slot map read
	reported map[string]bool     // "<range> <old>><new>" failovers logged
	primary  string              // the address last dialled (one address, Sentinel)
	demoted  string              // the address that answered READONLY, until one elsewhere is dialled
}

func newRedisHA(log *slog.Logger, sentinel bool) *RedisHA {
	return &RedisHA{
		log:      log,
		sentinel: sentinel,
		reported: map[string]bool{},
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "redis_failovers_total",
			Help: "Redis primary changes the client followed: a slot range's master replaced by its replica (Redis Cluster), a new primary named by Sentinel, or the primary answering READONLY (demoted).",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "redis_slot_map_reloads_total",
			Help: "Redis Cluster slot maps (CLUSTER SLOTS) the client read.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (h *RedisHA) Describe(ch chan<- *prometheus.Desc) {
	h.failovers.Describe(ch)
	h.reloads.Describe(ch)
}

// Collect implements prometheus.Collector.
func (h *RedisHA) Collect(ch chan<- prometheus.Metric) {
	h.failovers.Collect(ch)
	h.reloads.Collect(ch)
}

// slotMap notes a slot map a cluster client read. A range whose master is
// now the address that was its replica (or whose old master left the map)
// is a failover, logged once per range and old and new master even when
// a node that had not yet heard of it serves the old map again meanwhile;
// a range that moved to another master is a slot migration, not logged.
func (h *RedisHA) slotMap(slots []redis.ClusterSlot) {
	h.reloads.Inc()
	type change struct{ old, new string }
	var order []change
	changes := map[change][]string{}
	h.mu.Lock()
	prev := h.slots
	h.slots = slots
	present := map[string]bool{}
	for _, s := range slots {
		for _, n := range s.Nodes {
			present[n.Addr] = true
		}
	}
	for _, s := range slots {
		if len(s.Nodes) == 0 || prev == nil {
			continue
		}
		nw := s.Nodes[0].Addr
		old, replicas := slotOwner(prev, s.Start)
		if old == "" || old == nw || (!slices.Contains(replicas, nw) && present[old]) {
			continue
		}
		rng := strconv.Itoa(s.Start) + "-" + strconv.Itoa(s.End)
		key := rng + " " + old + ">" + nw
		if h.reported[key] {
			continue
		}
		h.reported[key] = true
		ch := change{old, nw}
		if changes[ch] == nil {
			order = append(order, ch)
		}
		changes[ch] = append(changes[ch], rng)
	}
	h.mu.Unlock()
	for _, ch := range order {
		h.failovers.Inc()
		h.log.Warn("redis failover followed", "old", ch.old, "new", ch.new, "slots", strings.Join(changes[ch], ","))
	}
}

// slotOwner is the master and replicas serving slot in slots.
func slotOwner(slots []redis.ClusterSlot, slot int) (string, []string) {
	for _, s := range slots {
		if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
			replicas := make([]string, 0, len(s.Nodes)-1)
			for _, n := range s.Nodes[1:] {
				replicas = append(replicas, n.Addr)
			}
			return s.Nodes[0].Addr, replicas
		}
	}
	return "", nil
}

// dialed notes a connection to addr of a one-address or Sentinel client.
// Under Sentinel a primary other than the last one is a failover
// (counted once: not again when READONLY announced it). With one address
// it ends a READONLY episode: the name now reaches another server.
func (h *RedisHA) dialed(addr string) {
	h.mu.Lock()
	old, demoted := h.primary, h.demoted
	h.primary = addr
	changed := old != "" && old != addr
	if changed {
		h.demoted = ""
	}
	h.mu.Unlock()
	switch {
	case !changed:
	case h.sentinel && demoted == "":
		h.failovers.Inc()
		h.log.Warn("redis failover followed", "old", old, "new", addr)
	case demoted != "":
		h.log.Info("redis failover followed", "old", old, "new", addr)
	}
}

// readOnly notes a READONLY answer: the primary was demoted. It counts
// once until a connection reaches another address; meanwhile go-redis
// closes each connection that got it and dials again. A server demoted,
// promoted back and demoted again at the same address counts once.
func (h *RedisHA) readOnly() {
	h.mu.Lock()
	first := h.demoted == ""
	if first {
		h.demoted = h.primary
		if h.demoted == "" {
			h.demoted = "?"
		}
	}
	addr := h.primary
	h.mu.Unlock()
	if first {
		h.failovers.Inc()
		h.log.Warn("redis primary demoted: it answers READONLY", "addr", addr)
	}
}

// clusterNodeHook is on every node client of a cluster client: it has
// the cluster client reload its slot map when a command may have failed
// for a failover (followFailover), and hands the maps read to RedisHA.
type clusterNodeHook struct {
	ha *RedisHA
	cc *redis.ClusterClient
}

func (h clusterNodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h clusterNodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if sc, ok := cmd.(*redis.ClusterSlotsCmd); ok && err == nil {
			h.ha.slotMap(sc.Val())
		}
		if followFailover(err) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

func (h clusterNodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		reload := followFailover(err)
		for _, cmd := range cmds {
			reload = reload || followFailover(cmd.Err())
		}
		if reload {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

// followFailover reports whether err may come from a node that died or
// lost its slots: any failure of the connection itself (refused, reset,
// EOF, a timeout, a failed handshake), or a refusal that the cluster is
// changing (CLUSTERDOWN, READONLY, MASTERDOWN, TRYAGAIN). A reply about
// the data (redis.Nil, a script error) or a closed client is not.
func followFailover(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return redis.IsClusterDownError(err) || redis.IsReadOnlyError(err) ||
			redis.IsMasterDownError(err) || redis.IsTryAgainError(err)
	}
	return true
}

// primaryHook is on a one-address or Sentinel client: it tells RedisHA
// where each new connection went and when a command got READONLY.
type primaryHook struct{ ha *RedisHA }

func (h primaryHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			// the address dialled, not addr: a Sentinel client passes its
			// own name ("FailoverClient"), a DNS name resolves anew
			h.ha.dialed(conn.RemoteAddr().String())
		}
		return conn, err
	}
}

func (h primaryHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if redis.IsReadOnlyError(err) {
			h.ha.readOnly()
		}
		return err
	}
}

func (h primaryHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if redis.IsReadOnlyError(cmd.Err()) {
				h.ha.readOnly()
				break
			}
		}
		return err
	}
}
