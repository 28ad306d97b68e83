package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/redisstore"
)

// TestTaskAttemptsAndInFlight: GET /v1/inflight lists a claimed task with
// its owner and deadline; GET /v1/tasks/{id} shows its ended attempts
// (the lists do not); bad queries are 4xx naming the parameter, Redis
// down a 503.
func TestTaskAttemptsAndInFlight(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	if rp := app.do("POST", "/v1/tasks", `{"id":"at1","type":"mail"}`); rp.Status != 201 {
		t.Fatalf("create: %d %s", rp.Status, rp.Raw)
	}
	// run takes and claims at1 as a worker would: the generation it runs
	run := func(owner string) uint64 {
		t.Helper()
		var gen uint64
		waitFor(t, "at1 taken", func() bool {
			tk, err := st.Take(t.Context(), st.Shard("at1"), 1, 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tk.Tasks {
				gen = x.Gen
			}
			return len(tk.Tasks) == 1
		})
		res, err := st.ClaimMany(t.Context(), []redisstore.Claim{{ID: "at1", Gen: gen, TTL: time.Minute, Owner: owner}})
		if err != nil || res[0].Code != redisstore.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		return gen
	}
	var empty api.InFlight
	strictRoundTrip(t, app.do("GET", "/v1/inflight", "").Raw, &empty)
	if empty.Tasks == nil || len(empty.Tasks) != 0 || empty.Truncated {
		t.Fatalf("nothing in flight: %+v", empty)
	}
	gen := run("host-1:41")
	rp := app.do("GET", "/v1/inflight?limit=5", "")
	var fl api.InFlight
	strictRoundTrip(t, rp.Raw, &fl)
	if rp.Status != 200 || len(fl.Tasks) != 1 || fl.Truncated {
		t.Fatalf("in flight: %d %s", rp.Status, rp.Raw)
	}
	if f := fl.Tasks[0]; f.ID != "at1" || f.Type != "mail" || f.Attempt != 1 || f.Owner != "host-1:41" || f.Shard != st.Shard("at1") ||
		f.ExpiresAt.Before(time.Now().Add(30*time.Second)) {
		t.Fatalf("in flight: %s", rp.Raw)
	}
	started := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	if _, err := st.Finish(t.Context(), redisstore.Finish{ID: "at1", Gen: gen, Kind: redisstore.Retry, Relative: true, Error: "smtp: 451 \"try later\"",
		Owner: "host-1:41", Attempt: 1, Started: started}); err != nil {
		t.Fatal(err)
	}
	gen = run("host-2:7")
	if _, err := st.Finish(t.Context(), redisstore.Finish{ID: "at1", Gen: gen, Kind: redisstore.Dead, Error: "bad address", Owner: "host-2:7", Attempt: 2}); err != nil {
		t.Fatal(err)
	}

	g := app.do("GET", "/v1/tasks/at1", "")
	var ti client.TaskInfo
	strictDecode(t, g.Raw, &ti)
	if g.Status != 200 || ti.State != "dead" || ti.LastError != "bad address" || len(ti.Attempts) != 2 || ti.AttemptsDropped != 0 {
		t.Fatalf("get: %d %s", g.Status, g.Raw)
	}
	var raw struct {
		Attempts []json.RawMessage `json:"attempts"`
	}
	if err := json.Unmarshal(g.Raw, &raw); err != nil {
		t.Fatal(err)
	}
	// the daemon writes each attempt as the api type does
	for i, a := range ti.Attempts {
		back, err := json.Marshal(a)
		if err != nil || string(back) != string(raw.Attempts[i]) {
			t.Fatalf("attempt %d: daemon %s, api %s (%v)", i, raw.Attempts[i], back, err)
		}
	}
	a1, a2 := ti.Attempts[0], ti.Attempts[1]
	if a1.Attempt != 1 || a1.Outcome != "retry" || a1.Error != `smtp: 451 "try later"` || !a1.StartedAt.Equal(started) || a1.EndedAt.Before(started) {
		t.Fatalf("attempt 1: %s", raw.Attempts[0])
	}
	if a2.Attempt != 2 || a2.Outcome != "dead" || a2.Error != "bad address" || !a2.StartedAt.IsZero() || strings.Contains(string(raw.Attempts[1]), "started_at") {
		t.Fatalf("attempt 2: %s", raw.Attempts[1])
	}
	for _, path := range []string{"/v1/tasks?state=dead", "/v1/dead"} {
		if lp := app.do("GET", path, ""); lp.Status != 200 || strings.Contains(string(lp.Raw), `"attempts"`) || !strings.Contains(string(lp.Raw), `"last_error":"bad address"`) {
			t.Fatalf("%s: %d %s", path, lp.Status, lp.Raw)
		}
	}
	if rp := app.do("GET", "/v1/inflight", ""); rp.Status != 200 || string(rp.Raw) != "{\"tasks\":[],\"truncated\":false}\n" {
		t.Fatalf("in flight after the outcome: %d %s", rp.Status, rp.Raw)
	}

	// bad queries
	for _, c := range []struct {
		path, code, names string
		status            int
	}{
		{"/v1/inflight?limit=0", "invalid_task", "limit", 422},
		{"/v1/inflight?limit=1001", "invalid_task", "limit", 422},
		{"/v1/inflight?limit=x", "invalid_task", "limit", 422},
		{"/v1/inflight?owner=x", "unknown_field", "owner", 400},
	} {
		if rp := app.do("GET", c.path, ""); rp.Status != c.status || rp.errCode() != c.code || !strings.Contains(rp.errMessage(), c.names) {
			t.Fatalf("%s: %d %s", c.path, rp.Status, rp.Raw)
		}
	}
	// Redis down: 503, never a 4xx
	r.Kill(t)
	waitFor(t, "the daemon to see redis down", func() bool { return !app.stats().RedisUp })
	if rp := app.do("GET", "/v1/inflight", ""); rp.Status != 503 || rp.errCode() != "unavailable" {
		t.Fatalf("redis down: %d %s", rp.Status, rp.Raw)
	}
}
