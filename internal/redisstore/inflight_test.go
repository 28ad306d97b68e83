package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// TestListInFlight: the claims held now across the shards, joined with
// their records, soonest deadline first; expired claims and claims of
// purged records are left out.
func TestListInFlight(t *testing.T) {
	t.Parallel()
	inFlightSuite(t, testenv.StartRedis(t).Client(t))
}

func TestListInFlightCluster(t *testing.T) {
	t.Parallel()
	inFlightSuite(t, testenv.StartRedisCluster(t).Client(t))
}

func inFlightSuite(t *testing.T, rdb redis.UniversalClient) {
	s := newStore(t, rdb, Options{Shards: 4})
	ctx := t.Context()
	if got, truncated, err := s.ListInFlight(ctx, 10); err != nil || len(got) != 0 || truncated {
		t.Fatalf("nothing claimed: %+v %v %v", got, truncated, err)
	}
	now := redisNow(t, s)
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%d", i)
		tk := mk(ids[i], now.Add(-time.Second))
		tk.Type = "type." + ids[i]
		schedule1(t, s, tk)
	}
	gens := map[string]uint64{}
	for _, f := range takeAll(t, s, 1) {
		gens[f.ID] = f.Gen
	}
	// run-0 the longest claim, run-3 the shortest; run-4's runs out at once
	ttl := []time.Duration{4 * time.Minute, 2 * time.Minute, 3 * time.Minute, time.Minute, time.Millisecond}
	for i, id := range ids {
		res, err := s.ClaimMany(ctx, []Claim{{ID: id, Gen: gens[id], TTL: ttl[i], Owner: fmt.Sprintf("host-%d:%d", i, i+10)}})
		if err != nil || res[0].Code != Claimed {
			t.Fatalf("claim %s: %+v %v", id, res, err)
		}
	}
	// run-2 ran once and failed: it runs its attempt 2 (claimed again)
	mustFinish(t, s, Finish{ID: "run-2", Gen: gens["run-2"], Kind: Retry, Relative: true, Error: "e", Owner: "host-2:12"})
	for _, f := range takeAll(t, s, 1) {
		gens[f.ID] = f.Gen
	}
	if res, err := s.ClaimMany(ctx, []Claim{{ID: "run-2", Gen: gens["run-2"], TTL: 3 * time.Minute, Owner: "host-2:13"}}); err != nil || res[0].Code != Claimed {
		t.Fatalf("claim again: %+v %v", res, err)
	}
	time.Sleep(5 * time.Millisecond) // run-4's claim of 1 ms runs out (Redis' clock)

	got, truncated, err := s.ListInFlight(ctx, 10)
	if err != nil || truncated {
		t.Fatalf("list: %v truncated %v", err, truncated)
	}
	want := []struct {
		id, owner string
		attempt   int
	}{{"run-3", "host-3:13", 1}, {"run-1", "host-1:11", 1}, {"run-2", "host-2:13", 2}, {"run-0", "host-0:10", 1}}
	if len(got) != len(want) {
		t.Fatalf("listed %+v, want %v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.id || g.Owner != w.owner || g.Attempt != w.attempt || g.Type != "type."+w.id || g.Shard != s.Shard(w.id) || g.Gen != gens[w.id] {
			t.Fatalf("entry %d: %+v, want %v", i, g, w)
		}
		if i > 0 && g.ExpiresAt.Before(got[i-1].ExpiresAt) {
			t.Fatalf("not by deadline: %+v", got)
		}
	}
	if d := got[0].ExpiresAt.Sub(now); d < time.Minute-time.Second || d > time.Minute+5*time.Second {
		t.Fatalf("run-3 expires %v after the schedule, want about a minute", d)
	}
	// a limit keeps the soonest and says so
	got, truncated, err = s.ListInFlight(ctx, 2)
	if err != nil || !truncated || len(got) != 2 || got[0].ID != "run-3" || got[1].ID != "run-1" {
		t.Fatalf("limit 2: %+v truncated %v %v", got, truncated, err)
	}
	// a claim whose record is gone is left out
	if err := rdb.HDel(ctx, s.k.bucket(s.Shard("run-3"), "run-3"), "run-3").Err(); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.ListInFlight(ctx, 10); err != nil || len(got) != 3 || got[0].ID != "run-1" {
		t.Fatalf("after run-3's record went: %+v %v", got, err)
	}
}
