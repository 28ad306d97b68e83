package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// TestGetDeadTaskDiedAt: GET /v1/tasks/{id} of a dead task shows died_at,
// the time /v1/dead shows for it; a task in another state has none.
func TestGetDeadTaskDiedAt(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	for _, id := range []string{"dd1", "alive"} {
		if rp := app.do("POST", "/v1/tasks", `{"id":"`+id+`","type":"x"}`); rp.Status != 201 {
			t.Fatalf("create %s: %d %s", id, rp.Status, rp.Raw)
		}
	}
	before := time.Now().Add(-time.Second)
	var tk redisstore.Taken
	var gen uint64
	taken := false
	deadline := time.Now().Add(5 * time.Second)
	for !taken && time.Now().Before(deadline) {
		var err error
		if tk, err = st.Take(t.Context(), st.Shard("dd1"), 1, 100, time.Minute); err != nil {
			t.Fatalf("take: %v", err)
		}
		for _, x := range tk.Tasks {
			if x.ID == "dd1" {
				gen, taken = x.Gen, true
			}
		}
	}
	if !taken {
		t.Fatal("dd1 was not taken")
	}
	if _, _, err := st.Settle(t.Context(), st.Shard("dd1"), 1, tk.Lease, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := st.Finish(t.Context(), redisstore.Finish{ID: "dd1", Gen: gen, Kind: redisstore.Dead, Error: "boom"}); err != nil || s != task.StateDead {
		t.Fatalf("finish dead: %s %v", s, err)
	}

	rp := app.do("GET", "/v1/tasks/dd1", "")
	if rp.Status != 200 || rp.str("state") != "dead" || rp.str("last_error") != "boom" {
		t.Fatalf("get dead: %d %s", rp.Status, rp.Raw)
	}
	died, err := time.Parse(time.RFC3339, rp.str("died_at"))
	if err != nil || died.Before(before) || died.After(time.Now().Add(time.Second)) {
		t.Fatalf("died_at %q: %v (%s)", rp.str("died_at"), err, rp.Raw)
	}
	var list struct {
		Dead []map[string]any `json:"dead"`
	}
	lp := app.do("GET", "/v1/dead", "")
	if err := json.Unmarshal(lp.Raw, &list); err != nil || len(list.Dead) != 1 || list.Dead[0]["died_at"] != rp.str("died_at") {
		t.Fatalf("dead list %s, want died_at %s (%v)", lp.Raw, rp.str("died_at"), err)
	}
	if ap := app.do("GET", "/v1/tasks/alive", ""); ap.Status != 200 || ap.JSON["died_at"] != nil {
		t.Fatalf("get alive: %d %s", ap.Status, ap.Raw)
	}
}
