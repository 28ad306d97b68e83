package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The sentinels replace a killed primary with its replica, which holds
// what the primary had replicated.
func TestSentinelKillPrimary(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, 1, RedisOptions{Password: "pw"})
	ctx := t.Context()
	old := s.Primary()
	reps := s.Replicas()
	if len(reps) != 1 || len(s.SentinelAddrs) != 3 {
		t.Fatalf("replicas %v, sentinels %v", reps, s.SentinelAddrs)
	}
	pc := old.Client(t)
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d %v", n, err)
	}
	s.KillPrimary(t)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nw, took, err := s.WaitSwitched(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinels switched from %s to %s %v after the kill", old.Addr, nw.Addr, took.Round(time.Millisecond))
	if nw != reps[0] || s.Primary() != nw {
		t.Fatalf("new primary %s, Primary() %s; want the replica %s", nw.Addr, s.Primary().Addr, reps[0].Addr)
	}
	if got, err := nw.Client(t).Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on the new primary: %q %v", got, err)
	}
	// go-redis' own Sentinel client finds it too, with the sentinels'
	// password (requirepass) and the nodes'
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs, SentinelPassword: "pw", Password: "pw",
	})
	defer fc.Close()
	if err := fc.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatalf("SET through a Sentinel client: %v", err)
	}
}

// DemoteInPlace leaves the old primary running as a replica of the new
// one: a client still connected to it gets READONLY.
func TestSentinelDemoteInPlace(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, 1)
	ctx := t.Context()
	old := s.Primary()
	oc := old.Client(t)
	if err := oc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	nw := s.DemoteInPlace(t)
	if nw == old || s.Primary() != nw || !old.running() {
		t.Fatalf("new primary %s, old %s (running %v)", nw.Addr, old.Addr, old.running())
	}
	if reps := s.Replicas(); len(reps) != 1 || reps[0] != old {
		t.Fatalf("replicas %v, want the old primary", reps)
	}
	if err := oc.Set(ctx, "k", "w", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("SET on the demoted primary: %v, want READONLY", err)
	}
	if err := nw.Client(t).Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatalf("SET on the new primary: %v", err)
	}
}

// With TLS and ACL users the replicas and sentinels log in as testenv's
// admin user over TLS, the sentinels listen on TLS, and a client with the
// PKI's certificate finds the primary through them.
func TestSentinelTLSWithACLUsers(t *testing.T) {
	t.Parallel()
	pki := NewPKI(t)
	s := StartSentinel(t, 1, RedisOptions{TLS: pki, Users: []RedisUser{{Name: "dq", Password: "pw", Rules: []string{"~*", "+@all"}}}})
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs,
		Username: "dq", Password: "pw", TLSConfig: pki.ClientTLS(t),
	})
	defer fc.Close()
	if err := fc.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through a Sentinel client over TLS: %v", err)
	}
}

// With both replicas cut off the sentinels promote one without the
// writes acknowledged after the cut; once healed, the other replica and
// the restarted old primary follow the new primary, and the old primary
// drops what it alone held.
func TestSentinelCutKillHeal(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, 2, RedisOptions{AOF: true, AppendFsync: "everysec"})
	ctx := t.Context()
	old := s.Primary()
	pc := old.Client(t)
	if err := pc.Set(ctx, "before", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 2, 5*time.Second).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 before the cut: %d %v", n, err)
	}
	s.CutReplication(t)
	if err := pc.Set(ctx, "after", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := pc.Wait(ctx, 1, 200*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 after the cut: %d replicas acknowledged (%v), want 0", n, err)
	}
	s.KillPrimary(t)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nw, took, err := s.WaitSwitched(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("switched from %s to %s %v after the kill", old.Addr, nw.Addr, took.Round(time.Millisecond))
	s.HealReplication(t)
	nc := nw.Client(t)
	if got, err := nc.Exists(ctx, "before", "after").Result(); err != nil || got != 1 {
		t.Fatalf("EXISTS before after on the new primary: %d %v, want 1 (before only)", got, err)
	}
	others := s.Replicas() // the old primary is down: the other replica
	if len(others) != 1 || others[0] == nw || others[0] == old {
		t.Fatalf("replicas %v after the switch to %s", others, nw.Addr)
	}
	old.Restart(t)
	for _, r := range []*Redis{others[0], old} {
		took, err := s.WaitReplica(wctx, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s follows %s %v later", r.Addr, nw.Addr, took.Round(time.Millisecond))
	}
	if n, err := nc.Wait(ctx, 2, 5*time.Second).Result(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 on the new primary: %d %v", n, err)
	}
	if got, err := old.Client(t).Exists(ctx, "before", "after").Result(); err != nil || got != 1 {
		t.Fatalf("EXISTS before after on the old primary, now a replica: %d %v, want 1", got, err)
	}
}
