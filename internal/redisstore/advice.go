package redisstore

import (
	"context"
	"fmt"
	"strconv"
)

// minListpackValue is the hash-max-listpack-value at which a record with a
// small payload stays in a bucket's compact encoding.
const minListpackValue = 256

// MemoryAdvice returns a warning when Redis' hash encoding settings make
// task records cost more memory than they need to (see docs/design.md
// "Memory"), or "" when they are fine or cannot be read (CONFIG disabled, as
// on some managed services).
func (s *Store) MemoryAdvice(ctx context.Context) string {
	for _, name := range []string{"hash-max-listpack-value", "hash-max-ziplist-value"} {
		m, err := s.rdb.ConfigGet(ctx, name).Result()
		if err != nil || m[name] == "" {
			continue
		}
		v, err := strconv.Atoi(m[name])
		if err != nil || v >= minListpackValue {
			return ""
		}
		return fmt.Sprintf("redis %s is %d: task records use about 20%% more memory than with 512 (set hash-max-listpack-value 512 and hash-max-listpack-entries 256)", name, v)
	}
	return ""
}

// ReplicaAdvice returns a warning when the replica acks setting does not
// fit the primary that holds the namespace's meta key (read with ROLE):
// replicas connected but ReplicaAcks 0, or below their number (a failover
// can lose acknowledged writes: docs/design.md "Redis failover"), or fewer
// connected replicas than ReplicaAcks (every durable write waits AckTimeout and is
// journaled or retried until they connect). "" when it fits or ROLE is
// not permitted (the least-privilege ACL user lacks it: @admin).
func (s *Store) ReplicaAdvice(ctx context.Context) string {
	c, err := s.primaryFor(ctx, s.k.meta)
	if err != nil {
		return ""
	}
	v, err := c.Do(ctx, "role").Slice()
	if err != nil || len(v) < 3 || v[0] != "master" {
		return ""
	}
	replicas, _ := v[2].([]any)
	n := len(replicas)
	switch {
	case s.acks == 0 && n > 0:
		return fmt.Sprintf("redis primary %s has %d replica(s) but DQ_REDIS_REPLICA_ACKS is 0: a failover to a replica that lags loses acknowledged writes (set DQ_REDIS_REPLICA_ACKS=1)", c.Options().Addr, n)
	case s.acks > n:
		return fmt.Sprintf("DQ_REDIS_REPLICA_ACKS is %d but redis primary %s has %d connected replica(s): every schedule is journaled, and every cancel, reschedule and outcome waits, until enough replicas connect", s.acks, c.Options().Addr, n)
	case s.acks < n:
		return fmt.Sprintf("DQ_REDIS_REPLICA_ACKS is %d but redis primary %s has %d replicas: a failover may promote a replica that did not confirm a write (a Sentinel failover does: measured), which loses it; set DQ_REDIS_REPLICA_ACKS=%d", s.acks, c.Options().Addr, n, n)
	}
	return ""
}

// PersistenceAdvice returns a warning when ReplicaAcks is set without
// WaitAOF and the primary that holds the namespace's meta key does not
// write its AOF before it answers (appendfsync other than always, or
// appendonly no), or "" when it does or CONFIG is not permitted (managed
// services, the least-privilege ACL user). WAIT makes a write survive the
// promotion of a replica that confirmed it, not the primary's own restart:
// a primary that is restarted before its replica is promoted comes back
// with what its AOF holds, and its replicas resync to it and drop the
// rest. With everysec Redis postpones its AOF writes (up to 2 s) while
// a background fsync runs and answers its clients meanwhile, so a kill -9
// then loses writes its replicas had confirmed (docs/design.md "Durable
// acknowledgement": measured).
func (s *Store) PersistenceAdvice(ctx context.Context) string {
	if s.acks == 0 || s.waitAOF {
		return ""
	}
	c, err := s.primaryFor(ctx, s.k.meta)
	if err != nil {
		return ""
	}
	m, err := c.ConfigGet(ctx, "append*").Result()
	if err != nil || m["appendonly"] == "" {
		return ""
	}
	addr := c.Options().Addr
	switch {
	case m["appendonly"] != "yes":
		return fmt.Sprintf("redis primary %s has appendonly %s: a primary restarted before its replica is promoted comes back empty and its replicas resync to it, so DQ_REDIS_REPLICA_ACKS does not keep acknowledged writes across that restart (set appendonly yes with appendfsync always, or DQ_REDIS_WAIT_AOF=true on Redis 7.2 or later, or never restart a failed primary before its replica is promoted)",
			addr, m["appendonly"])
	case m["appendfsync"] != "always":
		return fmt.Sprintf("redis primary %s has appendfsync %s: a primary killed and restarted before its replica is promoted can come back without up to ~2 s of writes its replicas confirmed (Redis postpones AOF writes while an fsync runs), and its replicas resync to it, so they are lost (set appendfsync always, or DQ_REDIS_WAIT_AOF=true on Redis 7.2 or later, or never restart a failed primary before its replica is promoted)",
			addr, m["appendfsync"])
	}
	return ""
}
