package testenv

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ReplicaOf makes replica a replica of primary (REPLICAOF, with the
// primary's login as masterauth when it has one) and waits until both
// report the link up and the primary lists the replica online (what WAIT
// and ROLE count).
func ReplicaOf(tb testing.TB, replica, primary *Redis) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	rc := redis.NewClient(replica.adminOptions())
	defer rc.Close()
	if primary.adminPassword != "" {
		if primary.adminUser != "" {
			if err := rc.ConfigSet(ctx, "masteruser", primary.adminUser).Err(); err != nil {
				tb.Fatalf("testenv: ReplicaOf: masteruser: %v", err)
			}
		}
		if err := rc.ConfigSet(ctx, "masterauth", primary.adminPassword).Err(); err != nil {
			tb.Fatalf("testenv: ReplicaOf: masterauth: %v", err)
		}
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := rc.Do(ctx, "replicaof", host, port).Err(); err != nil {
		tb.Fatalf("testenv: REPLICAOF %s on %s: %v", primary.Addr, replica.Addr, err)
	}
	waitLinked(ctx, tb, replica, primary, true)
	waitAcked(ctx, tb, primary)
}

// waitAcked waits until a write on primary is acknowledged by a replica
// (WAIT 1): a replica that has just synced acknowledges its offset only
// with its next REPLCONF ACK (once a second), and ROLE lists it online
// only then.
func waitAcked(ctx context.Context, tb testing.TB, primary *Redis) {
	tb.Helper()
	pc := redis.NewClient(primary.adminOptions())
	defer pc.Close()
	var last string
	if !poll(startTimeout, func() bool {
		if err := pc.Set(ctx, "testenv:acked", randomSecret(), 0).Err(); err != nil {
			last = err.Error()
			return false
		}
		n, err := pc.Do(ctx, "wait", 1, 200).Int()
		last = fmt.Sprintf("WAIT 1: %d %v", n, err)
		return err == nil && n >= 1
	}) {
		tb.Fatalf("testenv: no replica of %s acknowledges writes within %v: %s", primary.Addr, startTimeout, last)
	}
}

// PauseReplication stops replica from receiving primary's writes while
// both stay up (a wrong masterauth on the replica, then CLIENT KILL TYPE
// replica on the primary: the replica's reconnects fail at AUTH), so that
// WAIT 1 on the primary answers 0 at once, with no timing involved. The
// returned resume restores the replica's masterauth and waits until it has
// caught up.
func PauseReplication(tb testing.TB, replica, primary *Redis) (resume func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	rc := redis.NewClient(replica.adminOptions())
	defer rc.Close()
	old, err := rc.ConfigGet(ctx, "masterauth").Result()
	if err != nil {
		tb.Fatalf("testenv: PauseReplication: CONFIG GET masterauth: %v", err)
	}
	if err := rc.ConfigSet(ctx, "masterauth", "paused-"+randomSecret()).Err(); err != nil {
		tb.Fatalf("testenv: PauseReplication: CONFIG SET masterauth: %v", err)
	}
	pc := redis.NewClient(primary.adminOptions())
	defer pc.Close()
	if err := pc.Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		tb.Fatalf("testenv: PauseReplication: CLIENT KILL TYPE replica: %v", err)
	}
	waitLinked(ctx, tb, replica, primary, false)
	return func() {
		tb.Helper()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), startTimeout)
		defer cancel()
		rc := redis.NewClient(replica.adminOptions())
		defer rc.Close()
		if err := rc.ConfigSet(ctx, "masterauth", old["masterauth"]).Err(); err != nil {
			tb.Fatalf("testenv: resume replication: CONFIG SET masterauth: %v", err)
		}
		waitLinked(ctx, tb, replica, primary, true)
		waitAcked(ctx, tb, primary)
	}
}

// waitLinked waits until the replication link of replica to primary is up
// on both sides (up) or down on both (!up).
func waitLinked(ctx context.Context, tb testing.TB, replica, primary *Redis, up bool) {
	tb.Helper()
	var last string
	if !poll(startTimeout, func() bool {
		ri, err := replicationInfo(ctx, replica)
		if err != nil {
			last = err.Error()
			return false
		}
		mi, err := replicationInfo(ctx, primary)
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("replica master_link_status:%s, primary connected_slaves:%s", ri["master_link_status"], mi["connected_slaves"])
		if up {
			return ri["master_link_status"] == "up" && mi["connected_slaves"] == "1"
		}
		return ri["master_link_status"] == "down" && mi["connected_slaves"] == "0"
	}) {
		tb.Fatalf("testenv: replication %s -> %s not %s within %v: %s", primary.Addr, replica.Addr,
			map[bool]string{true: "up", false: "down"}[up], startTimeout, last)
	}
}
