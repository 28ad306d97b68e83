package daemon

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/event/leader"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/task"
)

// The operator API over real Redis (and etcd where the endpoint needs it):
// the list walk across shards, the bulk operations, their bounds and
// their hostile input.

// listPage is GET /v1/tasks' answer.
type listPage struct {
	Tasks []struct {
		ID     string     `json:"id"`
		Type   string     `json:"type"`
		State  task.State `json:"state"`
		DueAt  string     `json:"due_at"`
		Shard  int        `json:"shard"`
		DiedAt string     `json:"died_at"`
	} `json:"tasks"`
	Next string `json:"next_cursor"`
}

func (a *testApp) listPage(q url.Values) listPage {
	a.t.Helper()
	r := a.do("GET", "/v1/tasks?"+q.Encode(), "")
	if r.Status != 200 {
		a.t.Fatalf("list %s: %d %s", q.Encode(), r.Status, r.Raw)
	}
	var p listPage
	if err := json.Unmarshal(r.Raw, &p); err != nil {
		a.t.Fatalf("list: %v: %s", err, r.Raw)
	}
	return p
}

// walk lists every page of q; between pages it calls between (may be nil).
func (a *testApp) walk(q url.Values, between func(page int)) (ids []string, pages int) {
	a.t.Helper()
	for {
		p := a.listPage(q)
		pages++
		for _, tk := range p.Tasks {
			ids = append(ids, tk.ID)
		}
		if p.Next == "" {
			return ids, pages
		}
		if pages > 10000 {
			a.t.Fatal("walk does not end")
		}
		q.Set("cursor", p.Next)
		if between != nil {
			between(pages)
		}
	}
}

// scheduleMany schedules n tasks of typ due at due+i ms through the batch
// endpoint; ids are prefix-i.
func (a *testApp) scheduleMany(prefix, typ string, n int, due time.Time) []string {
	a.t.Helper()
	var ids []string
	for start := 0; start < n; start += 100 {
		var b strings.Builder
		b.WriteString(`{"tasks":[`)
		for i := start; i < min(start+100, n); i++ {
			if i > start {
				b.WriteByte(',')
			}
			id := fmt.Sprintf("%s-%d", prefix, i)
			ids = append(ids, id)
			fmt.Fprintf(&b, `{"id":%q,"type":%q,"due_at":%q}`, id, typ, due.Add(time.Duration(i)*time.Millisecond).UTC().Format(time.RFC3339Nano))
		}
		b.WriteString(`]}`)
		r := a.do("POST", "/v1/tasks/batch", b.String())
		if r.Status != 200 || strings.Contains(string(r.Raw), `"error"`) {
			a.t.Fatalf("batch: %d %s", r.Status, r.Raw)
		}
	}
	return ids
}

// fireDue takes every due task of every shard and settles the takes (the
// tasks are fired, as a leader would leave them once Kafka confirmed);
// it returns each fired task's generation.
func fireDue(t *testing.T, st *redisstore.Store) map[string]uint64 {
	t.Helper()
	gens := make(map[string]uint64)
	takeDue(t, st, func(sh int, tk redisstore.Taken) {
		for _, f := range tk.Fired() {
			gens[f.ID] = f.Gen
		}
		if _, _, err := st.Settle(t.Context(), sh, 1, tk.Lease, nil); err != nil {
			t.Fatalf("settle: %v", err)
		}
	})
	return gens
}

// takeDue takes every due task of every shard, 500 at a time, and hands
// each take to settle.
func takeDue(t *testing.T, st *redisstore.Store, settle func(sh int, tk redisstore.Taken)) {
	t.Helper()
	for sh := range st.Shards() {
		for {
			tk, err := st.Take(t.Context(), sh, 1, 500, time.Minute)
			if err != nil {
				t.Fatalf("take shard %d: %v", sh, err)
			}
			if len(tk.Tasks) == 0 {
				break
			}
			settle(sh, tk)
		}
	}
}

// killAll fires the due tasks and makes each dead (as a worker would after
// its last attempt).
func killAll(t *testing.T, st *redisstore.Store) []string {
	t.Helper()
	var ids []string
	for id, gen := range fireDue(t, st) {
		if s, err := st.Finish(t.Context(), redisstore.Finish{ID: id, Gen: gen, Kind: redisstore.Dead, Error: "boom"}); err != nil || s != task.StateDead {
			t.Fatalf("finish %s dead: %s %v", id, s, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// countIDs fails on an id seen twice and returns the set.
func countIDs(t *testing.T, ids []string) map[string]bool {
	t.Helper()
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("task %s listed twice in one walk", id)
		}
		seen[id] = true
	}
	return seen
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOperatorListWalk walks a stable set of tasks across 4 shards in
// small pages while other tasks are scheduled and fired between the
// pages: every task of the stable set comes exactly once, no task twice.
func TestOperatorListWalk(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 4
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	stable := app.scheduleMany("stable", "walk", 230, future)
	shards := make(map[int]bool)
	for _, id := range stable {
		shards[st.Shard(id)] = true
	}
	if len(shards) != 4 {
		t.Fatalf("the stable set is on %d shards, want 4", len(shards))
	}

	churn := 0
	ids, pages := app.walk(url.Values{"type": {"walk"}, "limit": {"7"}}, func(int) {
		// Between pages: new tasks of the same type (later and earlier
		// than the stable set) and tasks due now that get fired.
		churn++
		app.scheduleMany(fmt.Sprintf("late%d", churn), "walk", 3, future.Add(time.Minute))
		app.scheduleMany(fmt.Sprintf("early%d", churn), "walk", 2, time.Now().Add(-time.Second))
		fireDue(t, st)
	})
	seen := countIDs(t, ids)
	for _, id := range stable {
		if !seen[id] {
			t.Fatalf("stable task %s skipped by the walk (%d pages)", id, pages)
		}
	}
	if pages < 230/7 {
		t.Fatalf("%d pages for 230 tasks of limit 7", pages)
	}

	// Order: by due time across the shards (the stable set's ids are due
	// in their index order).
	all := app.listPage(url.Values{"type": {"walk"}, "limit": {"1000"}, "due_after": {future.UTC().Format(time.RFC3339Nano)}, "due_before": {future.Add(time.Second).UTC().Format(time.RFC3339Nano)}})
	for more := all.Next; more != ""; {
		p := app.listPage(url.Values{"type": {"walk"}, "limit": {"1000"}, "cursor": {more}, "due_after": {future.UTC().Format(time.RFC3339Nano)}, "due_before": {future.Add(time.Second).UTC().Format(time.RFC3339Nano)}})
		all.Tasks = append(all.Tasks, p.Tasks...)
		more = p.Next
	}
	if len(all.Tasks) != len(stable) {
		t.Fatalf("due range: %d tasks, want %d", len(all.Tasks), len(stable))
	}
	for i := 1; i < len(all.Tasks); i++ {
		a, b := all.Tasks[i-1], all.Tasks[i]
		if a.ID != stable[i-1] || b.ID != stable[i] {
			t.Fatalf("order: %+v before %+v", a, b)
		}
		if b.State != task.StateScheduled || b.Type != "walk" {
			t.Fatalf("listed %+v", b)
		}
	}

	// The fired tasks, by state.
	fired, _ := app.walk(url.Values{"state": {"fired"}, "type": {"walk"}, "limit": {"5"}}, nil)
	if got := len(countIDs(t, fired)); got != 2*churn {
		t.Fatalf("fired: %d tasks, want %d", got, 2*churn)
	}
}

// TestOperatorListOrderAcrossShards: GET /v1/tasks lists by due time
// across 16 shards, the first page being the earliest due tasks of all
// shards; the dead tasks by time of death, oldest first (GET /v1/dead:
// newest first).
func TestOperatorListOrderAcrossShards(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 16
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	// due in index order (1 ms apart), spread over the shards by their id
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	ids := app.scheduleMany("o", "order", 300, future)
	first := app.listPage(url.Values{"limit": {"20"}})
	shards := map[int]bool{}
	for i, tk := range first.Tasks {
		shards[tk.Shard] = true
		if i >= len(ids) || tk.ID != ids[i] {
			t.Fatalf("first page #%d: %s (shard %d), want %s", i, tk.ID, tk.Shard, ids[min(i, len(ids)-1)])
		}
	}
	if len(first.Tasks) != 20 || first.Next == "" || len(shards) < 8 {
		t.Fatalf("first page: %d tasks of %d shards, next %q", len(first.Tasks), len(shards), first.Next)
	}
	if got, _ := app.walk(url.Values{"state": {"scheduled"}, "limit": {"7"}}, nil); !slices.Equal(got, ids) {
		t.Fatalf("walk: %d tasks, not the %d in due order", len(got), len(ids))
	}

	// three rounds of deaths, each at a later millisecond than the last
	var died []string
	for round := range 3 {
		app.scheduleMany(fmt.Sprintf("d%d", round), "order.dead", 30, time.Now().Add(-time.Second))
		killed := killAll(t, st)
		slices.Sort(killed)
		died = append(died, killed...)
		end := time.Now()
		waitFor(t, "the clock to move on", func() bool { return time.Since(end) > 3*time.Millisecond })
	}
	dead, _ := app.walk(url.Values{"state": {"dead"}, "limit": {"9"}}, nil)
	if len(dead) != len(died) {
		t.Fatalf("dead: %d listed, want %d", len(dead), len(died))
	}
	roundOf := func(id string) string { return id[:2] }
	for i := 1; i < len(dead); i++ {
		if roundOf(dead[i-1]) > roundOf(dead[i]) {
			t.Fatalf("dead: %s listed before %s (an earlier death)", dead[i-1], dead[i])
		}
	}
	all := app.listPage(url.Values{"state": {"dead"}, "limit": {"1000"}})
	for i := 1; i < len(all.Tasks); i++ {
		a, b := all.Tasks[i-1], all.Tasks[i]
		if da, db := parseTime(t, a.DiedAt), parseTime(t, b.DiedAt); da.After(db) || (da.Equal(db) && a.ID > b.ID) {
			t.Fatalf("dead: %s died %s, listed before %s died %s", a.ID, a.DiedAt, b.ID, b.DiedAt)
		}
	}
	newest := app.do("GET", "/v1/dead?limit=1000", "")
	var nd struct {
		Dead []struct {
			ID     string `json:"id"`
			DiedAt string `json:"died_at"`
		} `json:"dead"`
	}
	if newest.Status != 200 || json.Unmarshal(newest.Raw, &nd) != nil || len(nd.Dead) != len(died) {
		t.Fatalf("GET /v1/dead: %d %s", newest.Status, newest.Raw)
	}
	for i := 1; i < len(nd.Dead); i++ {
		if parseTime(t, nd.Dead[i-1].DiedAt).Before(parseTime(t, nd.Dead[i].DiedAt)) {
			t.Fatalf("GET /v1/dead: %+v before %+v, not newest first", nd.Dead[i-1], nd.Dead[i])
		}
	}
	if roundOf(nd.Dead[0].ID) != "d2" || roundOf(nd.Dead[len(nd.Dead)-1].ID) != "d0" {
		t.Fatalf("GET /v1/dead: first %s, last %s", nd.Dead[0].ID, nd.Dead[len(nd.Dead)-1].ID)
	}
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return at
}

// TestOperatorListDead lists dead tasks with died_at, across shards, and
// by type.
func TestOperatorListDead(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 3
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	now := time.Now().Add(-time.Second)
	app.scheduleMany("da", "dead.a", 12, now)
	app.scheduleMany("db", "dead.b", 5, now)
	killAll(t, st)
	p := app.listPage(url.Values{"state": {"dead"}, "type": {"dead.a"}, "limit": {"1000"}})
	ids := []string{}
	for p.Next != "" || len(p.Tasks) > 0 {
		for _, tk := range p.Tasks {
			if tk.State != task.StateDead || tk.DiedAt == "" || tk.Type != "dead.a" {
				t.Fatalf("dead listed as %+v", tk)
			}
			ids = append(ids, tk.ID)
		}
		if p.Next == "" {
			break
		}
		p = app.listPage(url.Values{"state": {"dead"}, "type": {"dead.a"}, "limit": {"1000"}, "cursor": {p.Next}})
	}
	if len(countIDs(t, ids)) != 12 {
		t.Fatalf("dead.a: %d listed, want 12", len(ids))
	}
	all, _ := app.walk(url.Values{"state": {"dead"}, "limit": {"2"}}, nil)
	if len(countIDs(t, all)) != 17 {
		t.Fatalf("dead: %d listed, want 17", len(all))
	}
}

// TestOperatorBulkCancel: by ids and by filter, idempotent; other types
// and tasks out of the due range are left alone.
func TestOperatorBulkCancel(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 3
	app := startApp(t, cfg)

	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	ids := app.scheduleMany("c", "bulk.cancel", 40, future)
	other := app.scheduleMany("o", "bulk.other", 10, future)

	body := fmt.Sprintf(`{"ids":["%s","nope"]}`, strings.Join(ids[:10], `","`))
	for i, want := range []int{10, 0} {
		got := app.do("POST", "/v1/tasks/cancel", body)
		if got.Status != 200 || got.JSON["changed"] != float64(want) || got.JSON["more"] != false {
			t.Fatalf("cancel by ids, round %d: %d %s (want changed %d)", i, got.Status, got.Raw, want)
		}
	}
	if g := app.do("GET", "/v1/tasks/"+ids[0], ""); g.str("state") != "cancelled" {
		t.Fatalf("cancelled task: %s", g.Raw)
	}

	// By filter: the due range takes ids 10..29 (due future+10ms ..
	// future+29ms), exclusive upper bound.
	after := future.Add(10 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	before := future.Add(30 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	body = fmt.Sprintf(`{"filter":{"type":"bulk.cancel","due_after":%q,"due_before":%q}}`, after, before)
	for i, want := range []int{20, 0} {
		got := app.do("POST", "/v1/tasks/cancel", body)
		if got.Status != 200 || got.JSON["changed"] != float64(want) || got.JSON["more"] != false {
			t.Fatalf("cancel by filter, round %d: %d %s (want changed %d)", i, got.Status, got.Raw, want)
		}
	}
	for i, id := range ids {
		want := "cancelled"
		if i >= 30 {
			want = "scheduled"
		}
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.str("state") != want {
			t.Fatalf("task %d after the bulk: %s (want %s)", i, g.Raw, want)
		}
	}
	for _, id := range other {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.str("state") != "scheduled" {
			t.Fatalf("task of another type: %s", g.Raw)
		}
	}
	// An empty filter takes every waiting task.
	if got := app.do("POST", "/v1/tasks/cancel", `{"filter":{}}`); got.Status != 200 || got.JSON["changed"] != float64(20) {
		t.Fatalf("cancel all: %d %s", got.Status, got.Raw)
	}
	if s := app.stats(); s.Totals.Scheduled != 0 {
		t.Fatalf("scheduled after cancelling all: %d", s.Totals.Scheduled)
	}
}

// TestOperatorBulkBounded: a bulk by filter stops after bulkExamined
// tasks with more=true; repeating it finishes the work.
func TestOperatorBulkBounded(t *testing.T) {
	defer func(n int) { bulkExamined = n }(bulkExamined)
	bulkExamined = 30 // production: 10,000 (too slow to build here)

	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 2
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	app.scheduleMany("b", "bounded", 70, time.Now().Add(time.Hour))
	var rounds []string
	for {
		got := app.do("POST", "/v1/tasks/cancel", `{"filter":{"type":"bounded"}}`)
		if got.Status != 200 {
			t.Fatalf("cancel: %d %s", got.Status, got.Raw)
		}
		rounds = append(rounds, fmt.Sprintf("%v/%v", got.JSON["changed"], got.JSON["more"]))
		if got.JSON["more"] == false || len(rounds) > 10 {
			break
		}
	}
	if want := "30/true 30/true 10/false"; strings.Join(rounds, " ") != want {
		t.Fatalf("rounds (changed/more): %s, want %s", strings.Join(rounds, " "), want)
	}

	// The dead set the same way: 45 dead, redriven 30 + 15, then deleted.
	app.scheduleMany("d", "bounded.dead", 45, time.Now().Add(-time.Second))
	killAll(t, st)
	rounds = nil
	for range 4 {
		got := app.do("POST", "/v1/dead/redrive", `{"filter":{"type":"bounded.dead"}}`)
		rounds = append(rounds, fmt.Sprintf("%v/%v", got.JSON["changed"], got.JSON["more"]))
	}
	if want := "30/true 15/false 0/false 0/false"; strings.Join(rounds, " ") != want {
		t.Fatalf("redrive rounds: %s, want %s", strings.Join(rounds, " "), want)
	}
	killAll(t, st)
	rounds = nil
	for range 3 {
		got := app.do("DELETE", "/v1/dead", `{"filter":{"type":"bounded.dead"}}`)
		rounds = append(rounds, fmt.Sprintf("%v/%v", got.JSON["changed"], got.JSON["more"]))
	}
	if want := "30/true 15/false 0/false"; strings.Join(rounds, " ") != want {
		t.Fatalf("delete rounds: %s, want %s", strings.Join(rounds, " "), want)
	}
	if s := app.stats(); s.Totals.Dead != 0 {
		t.Fatalf("dead after the deletes: %d", s.Totals.Dead)
	}
}

// TestOperatorBulkDead: redrive and delete by ids and by type, each safe
// to repeat; other types untouched.
func TestOperatorBulkDead(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 3
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	past := time.Now().Add(-time.Second)
	a := app.scheduleMany("a", "dead.a", 8, past)
	b := app.scheduleMany("b", "dead.b", 6, past)
	killAll(t, st)

	body := fmt.Sprintf(`{"ids":["%s"]}`, strings.Join(a[:3], `","`))
	for i, want := range []int{3, 0} {
		got := app.do("POST", "/v1/dead/redrive", body)
		if got.Status != 200 || got.JSON["changed"] != float64(want) {
			t.Fatalf("redrive by ids, round %d: %d %s", i, got.Status, got.Raw)
		}
	}
	if g := app.do("GET", "/v1/tasks/"+a[0], ""); g.str("state") != "scheduled" {
		t.Fatalf("redriven: %s", g.Raw)
	}
	for i, want := range []int{5, 0} {
		got := app.do("POST", "/v1/dead/redrive", `{"filter":{"type":"dead.a"}}`)
		if got.Status != 200 || got.JSON["changed"] != float64(want) || got.JSON["more"] != false {
			t.Fatalf("redrive by type, round %d: %d %s", i, got.Status, got.Raw)
		}
	}
	// by type: ?type= (what clients sent before the body) and the body
	for i, c := range []struct {
		path, body string
		want       int
	}{{"/v1/dead?type=dead.b", "", 4}, {"/v1/dead?type=dead.b", "", 0}, {"/v1/dead", `{"filter":{"type":"dead.b"}}`, 0}} {
		if i == 0 {
			// two of them by ids first
			got := app.do("DELETE", "/v1/dead", fmt.Sprintf(`{"ids":[%q,%q,"no-such-task"]}`, b[0], b[1]))
			if got.Status != 200 || got.JSON["changed"] != float64(2) || got.JSON["more"] != false {
				t.Fatalf("delete by ids: %d %s", got.Status, got.Raw)
			}
		}
		got := app.do("DELETE", c.path, c.body)
		if got.Status != 200 || got.JSON["changed"] != float64(c.want) || got.JSON["more"] != false {
			t.Fatalf("delete by type, round %d: %d %s", i, got.Status, got.Raw)
		}
	}
	if g := app.do("GET", "/v1/tasks/"+b[0], ""); g.Status != 404 {
		t.Fatalf("deleted dead task: %d %s", g.Status, g.Raw)
	}
	for _, id := range a {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.str("state") != "scheduled" {
			t.Fatalf("dead.a after the deletes of dead.b: %s", g.Raw)
		}
	}
	// Delete every dead task: the empty filter names them all.
	killAll(t, st)
	if got := app.do("DELETE", "/v1/dead", `{"filter":{}}`); got.Status != 200 || got.JSON["changed"] != float64(8) {
		t.Fatalf("delete all dead: %d %s", got.Status, got.Raw)
	}
	if s := app.stats(); s.Totals.Dead != 0 || s.Totals.Scheduled != 0 {
		t.Fatalf("after deleting all dead: %+v", s.Totals)
	}
}

// TestDeleteDeadByIDs (issue 40): DELETE /v1/dead ignored its body and
// deleted every dead task: {"ids":["dd-1"]} answered {"changed":3} and
// left the dead set empty. It takes the body of the other bulk endpoints.
func TestDeleteDeadByIDs(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 2
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	app.scheduleMany("dd", "dead.d", 3, time.Now().Add(-time.Second))
	if n := len(killAll(t, st)); n != 3 {
		t.Fatalf("%d dead, want 3", n)
	}
	if got := app.do("DELETE", "/v1/dead", `{"ids":["dd-1"]}`); got.Status != 200 || got.JSON["changed"] != float64(1) || got.JSON["more"] != false {
		t.Fatalf("delete dd-1: %d %s", got.Status, got.Raw)
	}
	for id, want := range map[string]int{"dd-0": 200, "dd-1": 404, "dd-2": 200} {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.Status != want || (want == 200 && g.str("state") != "dead") {
			t.Fatalf("GET %s after deleting dd-1: %d %s", id, g.Status, g.Raw)
		}
	}
	// A request that names nothing deletes nothing.
	if got := app.do("DELETE", "/v1/dead", ""); got.Status != 422 {
		t.Fatalf("delete without a body: %d %s", got.Status, got.Raw)
	}
	if got := app.do("DELETE", "/v1/dead?type=", ""); got.Status != 422 {
		t.Fatalf("delete with an empty type: %d %s", got.Status, got.Raw)
	}
	if s := app.stats(); s.Totals.Dead != 2 {
		t.Fatalf("dead after the refused deletes: %d, want 2", s.Totals.Dead)
	}
}

// parkAll fires the due tasks, claims each (as a worker) and parks it (as
// a worker does for a paused type).
func parkAll(t *testing.T, st *redisstore.Store) []string {
	t.Helper()
	gens := fireDue(t, st)
	var cs []redisstore.Claim
	for id, gen := range gens {
		cs = append(cs, redisstore.Claim{ID: id, Gen: gen, TTL: time.Minute, Owner: "w1", Shard: st.Shard(id), ShardSet: true})
	}
	res, err := st.ClaimMany(t.Context(), cs)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var ps []redisstore.Park
	var ids []string
	for i, r := range res {
		if r.Code != redisstore.Claimed {
			t.Fatalf("claim %s: code %d", cs[i].ID, r.Code)
		}
		ps = append(ps, redisstore.Park{ID: cs[i].ID, Gen: cs[i].Gen, Type: r.Task.Type, Owner: "w1", Shard: cs[i].Shard})
		ids = append(ids, cs[i].ID)
	}
	n, err := st.ParkMany(t.Context(), ps)
	if err != nil || n != len(ps) {
		t.Fatalf("park: %d of %d, %v", n, len(ps), err)
	}
	return ids
}

// typesList is GET /v1/types' answer by type, decoded strictly into the
// client's wire type (api.Types), which must write it back byte for byte.
func (a *testApp) typesList() map[string]api.TypeInfo {
	a.t.Helper()
	r := a.do("GET", "/v1/types", "")
	if r.Status != 200 {
		a.t.Fatalf("types: %d %s", r.Status, r.Raw)
	}
	var body api.Types
	strictRoundTrip(a.t, r.Raw, &body)
	out := make(map[string]api.TypeInfo)
	for _, v := range body.Types {
		out[v.Type] = v
	}
	return out
}

// TestTypesPauseResume: pause and resume through the API land in etcd
// (package pause); GET /v1/types shows scheduled, paused, limited and
// parked types; resume unparks the parked tasks at their original due
// time, at once.
func TestTypesPauseResume(t *testing.T) {
	r, e, cfg := startRedisEtcd(t)
	cfg.Shards = 3
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	cli := e.Client(t)

	due := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	app.scheduleMany("p", "report.build", 9, due)
	app.scheduleMany("q", "mail.send", 2, time.Now().Add(time.Hour))
	if got := app.do("PUT", "/v1/limits/rate.limited", `{"concurrency":{"limit":3}}`); got.Status != 200 {
		t.Fatalf("put limit: %d %s", got.Status, got.Raw)
	}

	for i, want := range []bool{true, false} {
		got := app.do("POST", "/v1/types/report.build/pause", "")
		if got.Status != 200 || got.JSON["paused"] != true || got.JSON["changed"] != want || got.str("type") != "report.build" {
			t.Fatalf("pause, round %d: %d %s", i, got.Status, got.Raw)
		}
	}
	paused, err := pause.List(t.Context(), cli, cfg.Namespace)
	if err != nil || len(paused) != 1 || paused["report.build"].IsZero() {
		t.Fatalf("etcd pause state: %v %v", paused, err)
	}
	parked := parkAll(t, st)
	if len(parked) != 9 {
		t.Fatalf("parked %d, want 9", len(parked))
	}
	if g := app.do("GET", "/v1/tasks/"+parked[0], ""); g.str("state") != "paused" {
		t.Fatalf("parked task: %s", g.Raw)
	}

	types := app.typesList()
	if v := types["report.build"]; !v.Paused || v.PausedAt.IsZero() || v.Parked != 9 || v.Limit != nil {
		t.Fatalf("report.build: %+v", v)
	}
	if v, ok := types["mail.send"]; !ok || v.Paused || v.Parked != 0 {
		t.Fatalf("mail.send (scheduled through this daemon): %+v %v", v, ok)
	}
	if v, ok := types["rate.limited"]; !ok || v.Limit == nil || v.Limit.Concurrency == nil || v.Limit.Concurrency.Limit != 3 {
		t.Fatalf("rate.limited: %+v", v)
	}
	// A list of parked tasks by state.
	if ids, _ := app.walk(url.Values{"state": {"paused"}, "limit": {"4"}}, nil); len(countIDs(t, ids)) != 9 {
		t.Fatalf("paused list: %d", len(ids))
	}

	got := app.do("POST", "/v1/types/report.build/resume", "")
	if got.Status != 200 || got.JSON["paused"] != false || got.JSON["changed"] != true || got.JSON["resumed"] != float64(9) {
		t.Fatalf("resume: %d %s", got.Status, got.Raw)
	}
	if got := app.do("POST", "/v1/types/report.build/resume", ""); got.Status != 200 || got.JSON["changed"] != false || got.JSON["resumed"] != float64(0) {
		t.Fatalf("resume again: %d %s", got.Status, got.Raw)
	}
	if paused, err := pause.List(t.Context(), cli, cfg.Namespace); err != nil || len(paused) != 0 {
		t.Fatalf("etcd after resume: %v %v", paused, err)
	}
	for _, id := range parked {
		g := app.do("GET", "/v1/tasks/"+id, "")
		at, _ := time.Parse(time.RFC3339Nano, g.str("due_at"))
		if g.str("state") != "scheduled" || at.Before(due) || at.After(due.Add(time.Second)) {
			t.Fatalf("resumed task: %s (due %s)", g.Raw, due)
		}
	}
	if v := app.typesList()["report.build"]; v.Paused || v.Parked != 0 {
		t.Fatalf("report.build after resume: %+v", v)
	}
	// The unparked tasks fire again, and no attempt was spent.
	again := fireDue(t, st)
	for _, id := range parked {
		if _, ok := again[id]; !ok {
			t.Fatalf("resumed task %s did not fire", id)
		}
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.JSON["attempt"] != float64(1) {
			t.Fatalf("attempt after park and resume: %s", g.Raw)
		}
	}
}

// TestTypesParkedLeaveOnCancel (issue 40): a parked task cancelled (one
// by DELETE, one by the bulk cancel) or rescheduled is no longer counted
// as parked by GET /v1/types; it was until the type was resumed.
func TestTypesParkedLeaveOnCancel(t *testing.T) {
	r, _, cfg := startRedisEtcd(t)
	cfg.Shards = 2
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	if got := app.do("POST", "/v1/types/held/pause", ""); got.Status != 200 {
		t.Fatalf("pause: %d %s", got.Status, got.Raw)
	}
	app.scheduleMany("h", "held", 3, time.Now().Add(-time.Second))
	if n := len(parkAll(t, st)); n != 3 {
		t.Fatalf("parked %d, want 3", n)
	}
	parked := func(want int64) {
		t.Helper()
		if v := app.typesList()["held"]; !v.Paused || v.Parked != want {
			t.Fatalf("held: %+v, want %d parked", v, want)
		}
	}
	parked(3)
	if got := app.do("DELETE", "/v1/tasks/h-0", ""); got.Status != 200 || got.str("state") != "cancelled" {
		t.Fatalf("cancel h-0: %d %s", got.Status, got.Raw)
	}
	parked(2)
	if got := app.do("POST", "/v1/tasks/cancel", `{"ids":["h-1"]}`); got.Status != 200 || got.JSON["changed"] != float64(1) {
		t.Fatalf("bulk cancel h-1: %d %s", got.Status, got.Raw)
	}
	parked(1)
	if got := app.do("PATCH", "/v1/tasks/h-2", `{"delay":"1h"}`); got.Status != 200 {
		t.Fatalf("reschedule h-2: %d %s", got.Status, got.Raw)
	}
	parked(0)
	if g := app.do("GET", "/v1/tasks/h-2", ""); g.str("state") != "scheduled" {
		t.Fatalf("rescheduled parked task: %s", g.Raw)
	}
}

// TestTypesWithoutEtcd: the type endpoints need etcd and say so.
func TestTypesWithoutEtcd(t *testing.T) {
	r := startRedis(t)
	app := startApp(t, testConfig(t, r.Addr))
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/types"}, {"POST", "/v1/types/x/pause"}, {"POST", "/v1/types/x/resume"},
	} {
		got := app.do(c.method, c.path, "")
		if got.Status != 503 || got.errCode() != "unavailable" || !strings.Contains(got.errMessage(), "DQ_ETCD_ENDPOINTS") {
			t.Fatalf("%s %s without etcd: %d %s", c.method, c.path, got.Status, got.Raw)
		}
	}
}

// clusterOf is GET /v1/cluster, decoded strictly into the client's wire
// type (api.Cluster), which must write it back byte for byte.
func (a *testApp) clusterOf() api.Cluster {
	a.t.Helper()
	r := a.do("GET", "/v1/cluster", "")
	if r.Status != 200 {
		a.t.Fatalf("cluster: %d %s", r.Status, r.Raw)
	}
	var c api.Cluster
	strictRoundTrip(a.t, r.Raw, &c)
	return c
}

// TestClusterEndpoint runs a real leader.Manager (an event process's
// shard elections, adopting each shard it wins) and real registrars, and
// reads them back through GET /v1/cluster.
func TestClusterEndpoint(t *testing.T) {
	r, e, cfg := startRedisEtcd(t)
	cfg.Shards = 2
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	app.scheduleMany("o", "late", 3, time.Now().Add(-time.Minute))
	app.scheduleMany("f", "future", 4, time.Now().Add(time.Hour))

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	mgr, err := leader.New(leader.Config{
		Client: e.Client(t), Namespace: cfg.Namespace, Shards: cfg.Shards, ID: "event-1", TTL: 5 * time.Second,
		Lead: func(ctx context.Context, l leader.Lead) error {
			if _, err := st.Adopt(ctx, l.Shard, l.Token); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case <-l.Stop:
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []registry.Config{
		{Proc: registry.Proc{ID: "event-1", Kind: registry.KindEvent, Addr: "127.0.0.1:7071", Version: "v9 <script>"}},
		{Proc: registry.Proc{ID: "work-1", Kind: registry.KindWork, Addr: "127.0.0.1:7072"},
			Ready: func(context.Context) (bool, string) { return false, "kafka: no topic dq.tasks" }},
	} {
		p.Client, p.Namespace, p.Poll = e.Client(t), cfg.Namespace, 50*time.Millisecond
		reg, err := registry.New(p)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = reg.Run(ctx) })
	}
	wg.Go(func() { _ = mgr.Run(ctx) })

	var c api.Cluster
	waitFor(t, "both shards led by event-1 and both processes registered", func() bool {
		c = app.clusterOf()
		led := 0
		for _, s := range c.Shards {
			if s.Leader != nil && s.Leader.ID == "event-1" && s.Leader.Addr == "127.0.0.1:7071" && s.LeaderToken > 0 {
				led++
			}
		}
		procs := 0
		for _, p := range c.Processes {
			if p.ID == "event-1" || (p.ID == "work-1" && !p.Ready) {
				procs++
			}
		}
		return led == 2 && procs == 2
	})
	if c.Namespace != cfg.Namespace || c.ShardCount != 2 || !c.RedisUp || c.RedisError != "" || c.EtcdError != "" {
		t.Fatalf("cluster: %+v", c)
	}
	var pending, overdue int64
	for _, s := range c.Shards {
		pending += s.Pending
		overdue += s.Overdue
		if s.Overdue > 0 && s.OldestOverdueSeconds < 30 {
			t.Fatalf("shard %d: %d overdue, the oldest %.1fs", s.Shard, s.Overdue, s.OldestOverdueSeconds)
		}
	}
	if pending != 7 || overdue != 3 {
		t.Fatalf("pending %d (want 7), overdue %d (want 3): %+v", pending, overdue, c.Shards)
	}
	for _, p := range c.Processes {
		switch p.ID {
		case "event-1":
			if p.Kind != "event" || p.Version != "v9 <script>" || !p.Ready || p.StartedAt.IsZero() {
				t.Fatalf("event process: %+v", p)
			}
		case "work-1":
			if p.Kind != "work" || p.Reason != "kafka: no topic dq.tasks" {
				t.Fatalf("work process: %+v", p)
			}
		}
	}
	// A version is data from etcd: it comes back JSON-escaped.
	if raw := app.do("GET", "/v1/cluster", "").Raw; strings.Contains(string(raw), "<script>") {
		t.Fatalf("unescaped: %s", raw)
	}

	// Resigning: the shards show no leader.
	cancel()
	wg.Wait()
	waitFor(t, "no leader after the manager stopped", func() bool {
		c = app.clusterOf()
		return c.Shards[0].Leader == nil && c.Shards[1].Leader == nil
	})
}

// TestClusterDegraded: without etcd, and with Redis down, /v1/cluster
// still answers 200 and names what it could not read.
func TestClusterDegraded(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	c := app.clusterOf()
	if !strings.Contains(c.EtcdError, "DQ_ETCD_ENDPOINTS") || !c.RedisUp || len(c.Shards) != cfg.Shards || len(c.Processes) != 0 {
		t.Fatalf("without etcd: %+v", c)
	}
	r.Kill(t)
	waitFor(t, "redis down in /v1/cluster", func() bool {
		c = app.clusterOf()
		return !c.RedisUp && c.RedisError != ""
	})
	if len(c.Shards) != cfg.Shards || c.Shards[0].Leader != nil {
		t.Fatalf("redis down: %+v", c)
	}
}

// TestHostileOperator sends bad input to every operator endpoint: each
// answers its 4xx naming the field, and afterwards Redis (stats, keys)
// and etcd (pause state) are exactly as before. Data that looks like
// markup comes back JSON-escaped.
func TestHostileOperator(t *testing.T) {
	r, e, cfg := startRedisEtcd(t)
	cfg.MaxBody = 256 << 10
	cfg.Shards = 2
	app := startApp(t, cfg)
	rdb := r.Client(t)
	st := openStore(t, rdb, cfg)

	// Markup in an id and a type, and a dead task to redrive.
	const evilType, evilID = `<script>alert(1)</script>`, `<img/src=x/onerror=alert(1)>`
	if got := app.do("POST", "/v1/tasks", fmt.Sprintf(`{"id":%q,"type":%q,"delay":"1h"}`, evilID, evilType)); got.Status != 201 {
		t.Fatalf("schedule: %d %s", got.Status, got.Raw)
	}
	app.scheduleMany("k", "keep", 5, time.Now().Add(-time.Second))
	killAll(t, st)
	for _, path := range []string{"/v1/tasks?type=" + url.QueryEscape(evilType), "/v1/types"} {
		raw := string(app.do("GET", path, "").Raw)
		if !strings.Contains(raw, `\u003cscript\u003e`) || strings.Contains(raw, "<") {
			t.Fatalf("%s: markup not escaped: %s", path, raw)
		}
	}
	const evilPaused = `<b>&amp;"'`
	if got := app.do("POST", "/v1/types/"+url.PathEscape(evilPaused)+"/pause", ""); got.Status != 200 || strings.Contains(string(got.Raw), "<") || got.str("type") != evilPaused {
		t.Fatalf("pause a type that looks like markup: %d %s", got.Status, got.Raw)
	}
	if raw := string(app.do("GET", "/v1/types", "").Raw); !strings.Contains(raw, `\u003cb\u003e\u0026amp;\"'`) {
		t.Fatalf("paused type not escaped: %s", raw)
	}
	if got := app.do("POST", "/v1/types/"+url.PathEscape(evilPaused)+"/resume", ""); got.Status != 200 {
		t.Fatalf("resume: %d %s", got.Status, got.Raw)
	}
	// A cursor of another query.
	deadCursor := app.listPage(url.Values{"state": {"dead"}, "limit": {"1"}}).Next
	if deadCursor == "" {
		t.Fatal("no cursor for the dead set")
	}

	statsBefore, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	keysBefore := keyCount(t, rdb, cfg.Namespace)

	ids := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"ids":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k-%d"`, i)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	type tc struct {
		method, path, body string
		ct                 string // default application/json
		status             int
		code, msg          string
	}
	cases := []tc{
		// GET /v1/tasks
		{method: "GET", path: "/v1/tasks?state=bogus", status: 422, code: "invalid_task", msg: "state:"},
		{method: "GET", path: "/v1/tasks?state=%FF", status: 422, code: "invalid_task", msg: "state:"},
		{method: "GET", path: "/v1/tasks?state=dead&state=fired", status: 422, code: "invalid_task", msg: "state:"},
		{method: "GET", path: "/v1/tasks?type=%FF%FE", status: 422, code: "invalid_task", msg: "type:"},
		{method: "GET", path: "/v1/tasks?type=a%20b", status: 422, code: "invalid_task", msg: "type:"},
		{method: "GET", path: "/v1/tasks?type=" + strings.Repeat("t", 201), status: 422, code: "invalid_task", msg: "type:"},
		{method: "GET", path: "/v1/tasks?due_after=tomorrow", status: 422, code: "invalid_task", msg: "due_after:"},
		{method: "GET", path: "/v1/tasks?due_before=2030-01-02T15:04:05", status: 422, code: "invalid_task", msg: "due_before:"},
		{method: "GET", path: "/v1/tasks?due_before=2030-01-02T15:04:05%2B24:00", status: 422, code: "invalid_task", msg: "due_before:"},
		{method: "GET", path: "/v1/tasks?limit=0", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/tasks?limit=1001", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/tasks?limit=99999999999999999999999", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/tasks?limit=-1", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/tasks?limit=1e3", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/tasks?cursor=garbage", status: 422, code: "invalid_task", msg: "cursor:"},
		{method: "GET", path: "/v1/tasks?cursor=%FF", status: 422, code: "invalid_task", msg: "cursor:"},
		{method: "GET", path: "/v1/tasks?cursor=" + strings.Repeat("A", 5000), status: 422, code: "invalid_task", msg: "cursor:"},
		{method: "GET", path: "/v1/tasks?state=scheduled&cursor=" + url.QueryEscape(deadCursor), status: 422, code: "invalid_task", msg: "cursor:"},
		{method: "GET", path: "/v1/tasks?state=dead&type=keep&cursor=" + url.QueryEscape(deadCursor), status: 422, code: "invalid_task", msg: "cursor:"},
		{method: "GET", path: "/v1/tasks?cursor=" + url.QueryEscape(`"><script>alert(1)</script>`), status: 422, code: "invalid_task", msg: "cursor:"},
		// a cursor of an earlier daemon, which walked the shards one by one
		{method: "GET", path: "/v1/tasks?state=dead&cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"s":"dead","f":1,"sh":2,"at":true,"sc":5,"id":"x"}`)), status: 422, code: "invalid_task", msg: "listed this state shard by shard"},
		{method: "GET", path: "/v1/tasks?statee=dead", status: 400, code: "unknown_field", msg: "statee"},
		{method: "GET", path: "/v1/tasks?state=%zz", status: 422, code: "invalid_task", msg: "query:"},
		// POST /v1/tasks/cancel
		{method: "POST", path: "/v1/tasks/cancel", body: `{}`, status: 422, code: "invalid_task", msg: "ids, filter:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["k-0"],"filter":{}}`, status: 422, code: "invalid_task", msg: "ids, filter:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":null,"filter":null}`, status: 422, code: "invalid_task", msg: "ids, filter:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":"k-0"}`, status: 422, code: "invalid_task", msg: "ids:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["k-0",7]}`, status: 422, code: "invalid_task", msg: "ids[1]:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["k-0","a b"]}`, status: 422, code: "invalid_task", msg: "ids[1]:"},
		{method: "POST", path: "/v1/tasks/cancel", body: "{\"ids\":[\"k-0\",\"\xff\"]}", status: 422, code: "invalid_task", msg: "ids[1]:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["\ud800"]}`, status: 422, code: "invalid_task", msg: "ids[0]:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":[""]}`, status: 422, code: "invalid_task", msg: "ids[0]:"},
		{method: "POST", path: "/v1/tasks/cancel", body: ids(10001), status: 422, code: "invalid_task", msg: "ids:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["k-0"],"ids":["k-1"]}`, status: 400, code: "invalid_json", msg: "duplicate"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"Ids":["k-0"]}`, status: 400, code: "unknown_field", msg: "Ids"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["k-0"],"all":true}`, status: 400, code: "unknown_field", msg: "all"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"typ":"keep"}}`, status: 400, code: "unknown_field", msg: "filter.typ"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"type":"keep","type":"x"}}`, status: 400, code: "invalid_json", msg: "filter.type"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":"keep"}`, status: 422, code: "invalid_task", msg: "filter:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"type":7}}`, status: 422, code: "invalid_task", msg: "filter.type:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"type":"a b"}}`, status: 422, code: "invalid_task", msg: "filter.type:"},
		{method: "POST", path: "/v1/tasks/cancel", body: "{\"filter\":{\"type\":\"k\xfe\"}}", status: 422, code: "invalid_task", msg: "filter.type:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"due_after":"yesterday"}}`, status: 422, code: "invalid_task", msg: "filter.due_after:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"due_before":"2030-01-01"}}`, status: 422, code: "invalid_task", msg: "filter.due_before:"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{}`, status: 400, code: "invalid_json"},
		{method: "POST", path: "/v1/tasks/cancel", body: `[]`, status: 400, code: "invalid_json"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{}}`, ct: "text/plain", status: 415, code: "unsupported_media_type"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"ids":["` + strings.Repeat("a", 300<<10) + `"]}`, status: 413, code: "too_large"},
		// POST /v1/dead/redrive
		{method: "POST", path: "/v1/dead/redrive", body: `{"filter":{"due_after":"2030-01-01T00:00:00Z"}}`, status: 400, code: "unknown_field", msg: "filter.due_after"},
		{method: "POST", path: "/v1/dead/redrive", body: `{"ids":["k-0 "]}`, status: 422, code: "invalid_task", msg: "ids[0]:"},
		{method: "POST", path: "/v1/dead/redrive", body: `{"filter":{"type":"` + strings.Repeat("t", 201) + `"}}`, status: 422, code: "invalid_task", msg: "filter.type:"},
		{method: "POST", path: "/v1/dead/redrive", body: ``, ct: "application/json", status: 400, code: "invalid_json"},
		{method: "POST", path: "/v1/dead/redrive", body: `{"ids":[]}`, ct: "application/x-www-form-urlencoded", status: 415, code: "unsupported_media_type"},
		// DELETE /v1/dead
		{method: "DELETE", path: "/v1/dead?type=%FF", status: 422, code: "invalid_task", msg: "type:"},
		{method: "DELETE", path: "/v1/dead?type=a%09b", status: 422, code: "invalid_task", msg: "type:"},
		{method: "DELETE", path: "/v1/dead?type=keep&type=x", status: 422, code: "invalid_task", msg: "type:"},
		{method: "DELETE", path: "/v1/dead?typ=keep", status: 400, code: "unknown_field", msg: "typ"},
		// (issue 40: DELETE /v1/dead deleted every dead task unless ?type= named
		// one, whatever its body said; a request that names nothing is a 4xx)
		{method: "DELETE", path: "/v1/dead", status: 422, code: "invalid_task", msg: "ids, filter: the body is empty"},
		{method: "DELETE", path: "/v1/dead", body: " \n", status: 422, code: "invalid_task", msg: "ids, filter: the body is empty"},
		{method: "DELETE", path: "/v1/dead", body: `{}`, status: 422, code: "invalid_task", msg: "ids, filter:"},
		{method: "DELETE", path: "/v1/dead", body: `{"ids":null}`, status: 422, code: "invalid_task", msg: "ids, filter:"},
		{method: "DELETE", path: "/v1/dead", body: `{"all":true}`, status: 400, code: "unknown_field", msg: "all"},
		{method: "DELETE", path: "/v1/dead", body: `{"ids":["k-0"],"filter":{}}`, status: 422, code: "invalid_task", msg: "ids, filter:"},
		{method: "DELETE", path: "/v1/dead", body: `{"ids":["k-0 "]}`, status: 422, code: "invalid_task", msg: "ids[0]:"},
		{method: "DELETE", path: "/v1/dead", body: `{"filter":{"type":""}}`, status: 422, code: "invalid_task", msg: "filter.type:"},
		{method: "DELETE", path: "/v1/dead", body: `{"filter":{"due_before":"2030-01-01T00:00:00Z"}}`, status: 400, code: "unknown_field", msg: "filter.due_before"},
		{method: "DELETE", path: "/v1/dead", body: `{"filter":{}`, status: 400, code: "invalid_json"},
		{method: "DELETE", path: "/v1/dead", body: `{"filter":{}}`, ct: "text/plain", status: 415, code: "unsupported_media_type"},
		{method: "DELETE", path: "/v1/dead", body: `{"ids":["` + strings.Repeat("a", 300<<10) + `"]}`, status: 413, code: "too_large"},
		{method: "DELETE", path: "/v1/dead?type=", status: 422, code: "invalid_task", msg: "type: empty"},
		{method: "DELETE", path: "/v1/dead?type=keep", body: `{"ids":["k-0"]}`, status: 422, code: "invalid_task", msg: "type, body:"},
		{method: "DELETE", path: "/v1/dead?type=", body: `{"filter":{}}`, status: 422, code: "invalid_task", msg: "type, body:"},
		// an empty type is never "every type"
		{method: "GET", path: "/v1/tasks?type=", status: 422, code: "invalid_task", msg: "type: empty"},
		{method: "GET", path: "/v1/tasks?state=dead&type=", status: 422, code: "invalid_task", msg: "type: empty"},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{"type":""}}`, status: 422, code: "invalid_task", msg: "filter.type:"},
		{method: "POST", path: "/v1/dead/redrive", body: `{"filter":{"type":""}}`, status: 422, code: "invalid_task", msg: "filter.type:"},
		// GET /v1/dead is as strict as GET /v1/tasks (issue 40: these were 200)
		{method: "GET", path: "/v1/dead?foo=1", status: 400, code: "unknown_field", msg: `"foo"`},
		{method: "GET", path: "/v1/dead?cursor=zzz", status: 400, code: "unknown_field", msg: `"cursor"`},
		{method: "GET", path: "/v1/dead?type=keep", status: 400, code: "unknown_field", msg: "GET /v1/tasks?state=dead"},
		{method: "GET", path: "/v1/dead?limit=5&limit=6", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/dead?limit=0", status: 422, code: "invalid_task", msg: "limit:"},
		{method: "GET", path: "/v1/dead?limit=%zz", status: 422, code: "invalid_task", msg: "query:"},
		// pause / resume
		{method: "POST", path: "/v1/types/a%2Fb/pause", status: 422, code: "invalid_task", msg: "type:"},
		{method: "POST", path: "/v1/types/a%20b/pause", status: 422, code: "invalid_task", msg: "type:"},
		{method: "POST", path: "/v1/types/%FF/pause", status: 422, code: "invalid_task", msg: "type:"},
		{method: "POST", path: "/v1/types/" + strings.Repeat("t", 201) + "/resume", status: 422, code: "invalid_task", msg: "type:"},
		{method: "POST", path: "/v1/types/%0A/resume", status: 422, code: "invalid_task", msg: "type:"},
		// unknown endpoints near the new ones
		{method: "GET", path: "/v1/types/keep", status: 404, code: "not_found"},
		{method: "PUT", path: "/v1/cluster", status: 404, code: "not_found"},
	}
	for _, c := range cases {
		name := c.method + " " + task.Truncate(c.path, 80)
		h := http.Header{}
		if c.body != "" || c.ct != "" || c.method != "GET" { // writes say JSON, body or not
			h.Set("Content-Type", cmp.Or(c.ct, "application/json"))
		}
		got := app.doHeader(c.method, c.path, c.body, h)
		if got.Status != c.status || got.errCode() != c.code || !strings.Contains(got.errMessage(), c.msg) {
			t.Errorf("%s %s: %d %s, want %d %s naming %q", name, task.Truncate(c.body, 80), got.Status, task.Truncate(string(got.Raw), 300), c.status, c.code, c.msg)
		}
		if strings.Contains(string(got.Raw), "<") {
			t.Errorf("%s: unescaped markup in %s", name, got.Raw)
		}
	}

	statsAfter, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(statsBefore, statsAfter) {
		t.Fatalf("stats changed:\n%+v\n%+v", statsBefore, statsAfter)
	}
	if k := keyCount(t, rdb, cfg.Namespace); k != keysBefore {
		t.Fatalf("keys: %d, before %d", k, keysBefore)
	}
	if p, err := pause.List(t.Context(), e.Client(t), cfg.Namespace); err != nil || len(p) != 0 {
		t.Fatalf("pause state: %v %v", p, err)
	}
	if got := app.do("GET", "/v1/tasks?state=dead&type=keep", ""); strings.Count(string(got.Raw), `"state":"dead"`) != 5 {
		t.Fatalf("dead tasks after the hostile table: %s", got.Raw)
	}
}

// deliverDue takes every due task of every shard and settles each take
// with acknowledged receipts that end the tasks delivered (as a leader
// does for a topic no work process handles): partition 0, offset = the
// order of the copy, token 1.
func deliverDue(t *testing.T, st *redisstore.Store) []string {
	t.Helper()
	var ids []string
	takeDue(t, st, func(sh int, tk redisstore.Taken) {
		acks := make([]redisstore.Ack, len(tk.Tasks))
		for i, f := range tk.Tasks {
			acks[i] = redisstore.Ack{ID: f.ID, Gen: f.Gen, Attempt: f.Attempt, DueAt: f.DueAt, FiredAt: tk.Now,
				Partition: 0, Offset: int64(len(ids)), Token: 1, Delivered: true}
			ids = append(ids, f.ID)
		}
		if _, err := st.SettleAcks(t.Context(), sh, 1, tk.Lease, nil, acks); err != nil {
			t.Fatalf("settle: %v", err)
		}
	})
	return ids
}

// TestOperatorListDelivered: GET /v1/tasks takes state=delivered (and
// names it among the states when refusing one) and lists the delivered
// tasks with their fire receipts; a task only fired is not listed; a
// delivered task is terminal: cancel answers 409 and the bulk cancel
// skips it.
func TestOperatorListDelivered(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.Shards = 2
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	app.scheduleMany("df", "delivered.fired", 2, time.Now().Add(-time.Second))
	fireDue(t, st)
	delivered := app.scheduleMany("dl", "delivered.list", 3, time.Now().Add(-time.Second))
	deliverDue(t, st)

	ids, _ := app.walk(url.Values{"state": {"delivered"}, "limit": {"2"}}, nil)
	if got := countIDs(t, ids); len(got) != 3 || !got[delivered[0]] || !got[delivered[1]] || !got[delivered[2]] {
		t.Fatalf("delivered listed: %v, want %v", ids, delivered)
	}
	r0 := app.do("GET", "/v1/tasks?state=delivered&type=delivered.list&limit=1000", "")
	var page struct {
		Tasks []map[string]any `json:"tasks"`
	}
	if err := json.Unmarshal(r0.Raw, &page); err != nil || len(page.Tasks) != 3 {
		t.Fatalf("list: %v %s", err, r0.Raw)
	}
	for _, tk := range page.Tasks {
		if tk["state"] != "delivered" || tk["partition"] != 0.0 || tk["fired_at"] == nil || tk["leader_token"] != 1.0 ||
			tk["fired_attempt"] != 1.0 || tk["late_ms"] == nil || tk["fired_due_at"] != tk["due_at"] {
			t.Fatalf("delivered task listed without its receipt: %v", tk)
		}
	}
	if g := app.do("GET", "/v1/tasks/"+delivered[0], ""); g.str("state") != "delivered" || g.JSON["offset"] == nil {
		t.Fatalf("get delivered: %s", g.Raw)
	}

	// terminal: a cancel is a conflict; the bulk cancel changes nothing
	if got := app.do("DELETE", "/v1/tasks/"+delivered[0], ""); got.Status != 409 || !strings.Contains(string(got.Raw), "delivered") {
		t.Fatalf("cancel delivered: %d %s", got.Status, got.Raw)
	}
	if got := app.do("POST", "/v1/tasks/cancel", fmt.Sprintf(`{"ids":[%q]}`, delivered[1])); got.Status != 200 || got.JSON["changed"] != 0.0 {
		t.Fatalf("bulk cancel delivered: %d %s", got.Status, got.Raw)
	}
	if got := app.do("POST", "/v1/tasks/cancel", `{"filter":{"type":"delivered.list"}}`); got.Status != 200 || got.JSON["changed"] != 0.0 {
		t.Fatalf("bulk cancel by filter: %d %s", got.Status, got.Raw)
	}
	if g := app.do("GET", "/v1/tasks/"+delivered[1], ""); g.str("state") != "delivered" {
		t.Fatalf("after the bulk cancels: %s", g.Raw)
	}

	if got := app.do("GET", "/v1/tasks?state=bogus", ""); got.Status != 422 || !strings.Contains(string(got.Raw), "cancelled, delivered") {
		t.Fatalf("bogus state: %d %s", got.Status, got.Raw)
	}
}

// TestOpenAPIListStates: api/openapi.yaml documents exactly the states
// GET /v1/tasks takes, and the State schema names each of them.
func TestOpenAPIListStates(t *testing.T) {
	var doc struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Schemas map[string]struct {
				Enum []string `yaml:"enum"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Parameters []struct {
			Name   string `yaml:"name"`
			Schema struct {
				Enum []string `yaml:"enum"`
			} `yaml:"schema"`
		} `yaml:"parameters"`
	}
	get := doc.Paths["/v1/tasks"]["get"]
	if err := get.Decode(&list); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, p := range list.Parameters {
		if p.Name == "state" {
			documented = p.Schema.Enum
		}
	}
	taken := slices.Sorted(maps.Keys(listStates))
	if slices.Sort(documented); !slices.Equal(documented, taken) {
		t.Errorf("GET /v1/tasks state enum %q, the daemon takes %q", documented, taken)
	}
	states := doc.Components.Schemas["State"].Enum
	for _, s := range taken {
		if s != "" && !slices.Contains(states, s) {
			t.Errorf("State schema %q lacks %q", states, s)
		}
	}
}
