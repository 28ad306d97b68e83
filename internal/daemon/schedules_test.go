package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/schedule"
	"github.com/delayq/delayq/internal/testenv"
)

// The schedule endpoints against a real etcd (and Redis, which the daemon
// needs to start): create, replace, read, list, pause, resume and delete;
// every bad input answers 4xx naming the field and changes nothing; etcd
// missing or down answers 503.

// schedView is a schedule view as a test reads it.
type schedView struct {
	ID         string          `json:"id"`
	Cron       string          `json:"cron"`
	Timezone   string          `json:"timezone"`
	Catchup    string          `json:"catchup"`
	Paused     bool            `json:"paused"`
	Task       json.RawMessage `json:"task"`
	StartAt    *time.Time      `json:"start_at"`
	EndAt      *time.Time      `json:"end_at"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	Revision   int64           `json:"revision"`
	Next       []string        `json:"next"`
	NextError  string          `json:"next_error"`
	LastTick   *string         `json:"last_tick"`
	LastTaskID *string         `json:"last_task_id"`
	Created    *bool           `json:"created"`
	Changed    *bool           `json:"changed"`
}

func decodeView(t testing.TB, r reply) schedView {
	t.Helper()
	var v schedView
	if err := json.Unmarshal(r.Raw, &v); err != nil {
		t.Fatalf("schedule view: %v: %s", err, r.Raw)
	}
	for _, k := range []string{"last_tick", "last_task_id", "next", "paused", "timezone", "catchup"} {
		if _, ok := r.JSON[k]; !ok {
			t.Fatalf("schedule view without %q: %s", k, r.Raw)
		}
	}
	return v
}

// startScheduleApp is a daemon with etcd, and a client of that etcd.
func startScheduleApp(t *testing.T, opts ...func(*Config)) (*testApp, *testenv.Etcd, *clientv3.Client) {
	t.Helper()
	_, e, cfg := startRedisEtcd(t)
	for _, o := range opts {
		o(&cfg)
	}
	return startApp(t, cfg), e, e.Client(t)
}

// etcdSnapshot is every key under the namespace's schedule and state
// prefixes with its mod revision.
func etcdSnapshot(t testing.TB, cli *clientv3.Client, ns string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range []string{schedule.Prefix(ns), schedule.StatePrefix(ns)} {
		resp, err := cli.Get(t.Context(), p, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = kv.ModRevision
		}
	}
	return out
}

func TestSchedulesCRUD(t *testing.T) {
	app, _, cli := startScheduleApp(t)
	ns := app.cfg.Namespace
	before := time.Now()

	// Create: 201, the view with the effective defaults and 5 ticks in
	// the schedule's zone.
	body := `{"cron":"0 30 9 * * MON-FRI","timezone":"Europe/Berlin","task":{"type":"report.daily","payload":{"to":"ops"},"headers":{"h":"v"},"timeout":"30s"}}`
	got := app.do("PUT", "/v1/schedules/report", body)
	if got.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", got.Status, got.Raw)
	}
	v := decodeView(t, got)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if v.ID != "report" || v.Cron != "0 30 9 * * MON-FRI" || v.Timezone != "Europe/Berlin" || v.Catchup != "last" || v.Paused ||
		v.Created == nil || !*v.Created || v.Changed != nil || v.LastTick != nil || v.LastTaskID != nil || v.Revision == 0 ||
		v.CreatedAt.Before(before.Add(-time.Second)) || !v.CreatedAt.Equal(v.UpdatedAt) {
		t.Fatalf("created view: %s", got.Raw)
	}
	var task map[string]any
	if err := json.Unmarshal(v.Task, &task); err != nil || task["type"] != "report.daily" || task["timeout"] != "30s" {
		t.Fatalf("task in view: %s", v.Task)
	}
	if len(v.Next) != 5 {
		t.Fatalf("next: %q", v.Next)
	}
	prev := before
	for _, s := range v.Next {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatalf("next %q: %v", s, err)
		}
		_, off := at.In(berlin).Zone()
		_, gotOff := at.Zone()
		local := at.In(berlin)
		if off != gotOff || !at.After(prev) || local.Hour() != 9 || local.Minute() != 30 || local.Second() != 0 ||
			local.Weekday() == time.Saturday || local.Weekday() == time.Sunday || !strings.HasSuffix(s, ":00.000"+local.Format("-07:00")) {
			t.Fatalf("next tick %q (after %s) is not a weekday 09:30 in Europe/Berlin: %q", s, prev, v.Next)
		}
		prev = at
	}
	var stored map[string]any
	if resp, err := cli.Get(t.Context(), schedule.Key(ns, "report")); err != nil || len(resp.Kvs) != 1 || json.Unmarshal(resp.Kvs[0].Value, &stored) != nil {
		t.Fatalf("etcd after create: %v %v", resp, err)
	}

	// Replace: 200, created_at kept, a new revision.
	body2 := `{"cron":"@every 1h","task":{"type":"report.hourly"},"catchup":"all","start_at":"2026-01-01T00:00:00Z"}`
	got = app.do("PUT", "/v1/schedules/report", body2)
	v2 := decodeView(t, got)
	if got.Status != 200 || v2.Created == nil || *v2.Created || !v2.CreatedAt.Equal(v.CreatedAt) || v2.UpdatedAt.Before(v.UpdatedAt) ||
		v2.Revision <= v.Revision || v2.Timezone != "UTC" || v2.Catchup != "all" || v2.StartAt == nil || len(v2.Next) != 5 {
		t.Fatalf("replace: %d %s", got.Status, got.Raw)
	}
	for i, s := range v2.Next {
		at, _ := time.Parse(time.RFC3339, s)
		if at.Minute() != 0 || at.Second() != 0 || !strings.HasSuffix(s, "Z") || (i > 0 && at.Sub(mustTime(t, v2.Next[i-1])) != time.Hour) {
			t.Fatalf("@every 1h ticks: %q", v2.Next)
		}
	}

	// Read back: the same view (without created); the last fired tick
	// comes from the scheduler's state.
	got = app.do("GET", "/v1/schedules/report", "")
	if got.Status != 200 || decodeView(t, got).Created != nil || decodeView(t, got).Revision != v2.Revision {
		t.Fatalf("get: %d %s", got.Status, got.Raw)
	}
	now := time.Now().Truncate(time.Hour)
	fired, future := now.Add(-time.Hour), now.Add(time.Hour)
	state := schedule.State{SpecRev: v2.Revision, Through: future.UnixMilli(),
		Pending: []int64{future.UnixMilli()}, Recent: []int64{now.Add(-2 * time.Hour).UnixMilli(), fired.UnixMilli(), future.UnixMilli()}}
	b, _ := json.Marshal(state)
	if _, err := cli.Put(t.Context(), schedule.StateKey(ns, "report"), string(b)); err != nil {
		t.Fatal(err)
	}
	got = app.do("GET", "/v1/schedules/report", "")
	v3 := decodeView(t, got)
	wantID := fmt.Sprintf("report@%d", fired.UnixMilli())
	if v3.LastTick == nil || !mustTime(t, *v3.LastTick).Equal(fired) || v3.LastTaskID == nil || *v3.LastTaskID != wantID {
		t.Fatalf("last tick (want %s, %s): %s", fired, wantID, got.Raw)
	}

	// A second schedule; the list is sorted by id and carries the states.
	if got := app.do("PUT", "/v1/schedules/a.first", `{"cron":"*/5 * * * * *","task":{"type":"x"},"paused":true}`); got.Status != 201 {
		t.Fatalf("create a.first: %d %s", got.Status, got.Raw)
	}
	list := app.listSchedules()
	if len(list) != 2 || list[0].ID != "a.first" || list[1].ID != "report" || !list[0].Paused || len(list[0].Next) != 5 ||
		list[1].LastTaskID == nil || *list[1].LastTaskID != wantID || list[0].LastTick != nil {
		t.Fatalf("list: %+v", list)
	}

	// Pause and resume: idempotent, the view says whether it changed; a
	// paused schedule still shows the ticks it would fire.
	for _, c := range []struct {
		action         string
		paused, change bool
	}{{"pause", true, true}, {"pause", true, false}, {"resume", false, true}, {"resume", false, false}} {
		got := app.do("POST", "/v1/schedules/report/"+c.action, "")
		pv := decodeView(t, got)
		if got.Status != 200 || pv.Paused != c.paused || pv.Changed == nil || *pv.Changed != c.change || len(pv.Next) != 5 || pv.Cron != "@every 1h" {
			t.Fatalf("%s (want paused %v, changed %v): %d %s", c.action, c.paused, c.change, got.Status, got.Raw)
		}
		if g := decodeView(t, app.do("GET", "/v1/schedules/report", "")); g.Paused != c.paused {
			t.Fatalf("after %s: paused %v", c.action, g.Paused)
		}
	}

	// Delete: 200, then 404 for every operation on it.
	if got := app.do("DELETE", "/v1/schedules/report", ""); got.Status != 200 || got.str("id") != "report" || got.JSON["deleted"] != true {
		t.Fatalf("delete: %d %s", got.Status, got.Raw)
	}
	if resp, err := cli.Get(t.Context(), schedule.Key(ns, "report")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("etcd after delete: %v %v", resp, err)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/schedules/report"}, {"DELETE", "/v1/schedules/report"},
		{"POST", "/v1/schedules/report/pause"}, {"POST", "/v1/schedules/report/resume"},
	} {
		if got := app.do(c.method, c.path, ""); got.Status != 404 || got.errCode() != "not_found" || !strings.Contains(got.errMessage(), "report") {
			t.Errorf("%s %s after delete: %d %s", c.method, c.path, got.Status, got.Raw)
		}
	}
	if list := app.listSchedules(); len(list) != 1 || list[0].ID != "a.first" {
		t.Fatalf("list after delete: %+v", list)
	}
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return at
}

func (a *testApp) listSchedules() []schedView {
	a.t.Helper()
	got := a.do("GET", "/v1/schedules", "")
	var l struct {
		Schedules []schedView `json:"schedules"`
	}
	if got.Status != 200 || json.Unmarshal(got.Raw, &l) != nil || l.Schedules == nil {
		a.t.Fatalf("list schedules: %d %s", got.Status, got.Raw)
	}
	return l.Schedules
}

// TestSchedulesBadInput: every bad request answers 4xx with the field at
// fault named, and leaves etcd as it was (a new id is not created, an
// existing schedule keeps its spec and revision).
func TestSchedulesBadInput(t *testing.T) {
	app, _, cli := startScheduleApp(t, func(c *Config) { c.MaxRecordBytes = 2048 })
	ns := app.cfg.Namespace
	if got := app.do("PUT", "/v1/schedules/keep", `{"cron":"@daily","task":{"type":"x"}}`); got.Status != 201 {
		t.Fatalf("create: %d %s", got.Status, got.Raw)
	}
	snap := etcdSnapshot(t, cli, ns)
	keep := decodeView(t, app.do("GET", "/v1/schedules/keep", ""))

	big := strings.Repeat("a", 2<<20)
	for _, c := range []struct {
		name, body string
		status     int
		code, msg  string // msg: the start of the message
	}{
		{"bad cron", `{"cron":"61 * * * *","task":{"type":"x"}}`, 422, "invalid_schedule", "cron:"},
		{"six fields out of range", `{"cron":"* * * * * * *","task":{"type":"x"}}`, 422, "invalid_schedule", "cron:"},
		{"no cron", `{"task":{"type":"x"}}`, 422, "invalid_schedule", "cron:"},
		{"every too short", `{"cron":"@every 10ms","task":{"type":"x"}}`, 422, "invalid_schedule", "cron:"},
		{"cron not a string", `{"cron":5,"task":{"type":"x"}}`, 422, "invalid_schedule", "cron:"},
		{"bad time zone", `{"cron":"@hourly","timezone":"Mars/Olympus","task":{"type":"x"}}`, 422, "invalid_schedule", "timezone:"},
		{"local time zone", `{"cron":"@hourly","timezone":"Local","task":{"type":"x"}}`, 422, "invalid_schedule", "timezone:"},
		{"end before start", `{"cron":"@hourly","task":{"type":"x"},"start_at":"2030-01-02T00:00:00Z","end_at":"2030-01-01T00:00:00Z"}`, 422, "invalid_schedule", "end_at:"},
		// issue 40: time.Parse takes +24:00, which JSON cannot write back:
		// it was a 503 "etcd: encode schedule", retried forever
		{"start_at offset +24:00", `{"cron":"@every 1h","task":{"type":"t"},"start_at":"2026-01-01T00:00:00+24:00"}`, 422, "invalid_schedule", "start_at:"},
		{"end_at offset +24:00", `{"cron":"@every 1h","task":{"type":"t"},"end_at":"2046-01-01T00:00:00+24:00"}`, 422, "invalid_schedule", "end_at:"},
		{"end_at offset -24:00", `{"cron":"@every 1h","task":{"type":"t"},"end_at":"2046-01-01T00:00:00-24:00"}`, 422, "invalid_schedule", "end_at:"},
		{"start_at offset minute 60", `{"cron":"@every 1h","task":{"type":"t"},"start_at":"2026-01-01T00:00:00+01:60"}`, 422, "invalid_schedule", "start_at:"},
		{"end_at in 1971", `{"cron":"@every 1h","task":{"type":"t"},"end_at":"1971-01-01T00:00:00Z"}`, 422, "invalid_schedule", "end_at:"},
		{"end_at a second ago", `{"cron":"@every 1h","task":{"type":"t"},"end_at":"` + time.Now().Add(-time.Second).UTC().Format(time.RFC3339) + `"}`, 422, "invalid_schedule", "end_at:"},
		{"end_at past the last due time", `{"cron":"@every 1h","task":{"type":"t"},"end_at":"2300-01-01T00:00:00Z"}`, 422, "invalid_schedule", "end_at:"},
		{"bad catchup", `{"cron":"@hourly","task":{"type":"x"},"catchup":"some"}`, 422, "invalid_schedule", "catchup:"},
		{"no task type", `{"cron":"@hourly","task":{}}`, 422, "invalid_schedule", "task.type:"},
		{"no task", `{"cron":"@hourly"}`, 422, "invalid_schedule", "task.type:"},
		{"bad task type", `{"cron":"@hourly","task":{"type":"has space"}}`, 422, "invalid_schedule", "task.type:"},
		{"payload and payload_base64", `{"cron":"@hourly","task":{"type":"x","payload":{"a":1},"payload_base64":"AA=="}}`, 422, "invalid_schedule", "task.payload:"},
		{"bad base64", `{"cron":"@hourly","task":{"type":"x","payload_base64":"%%"}}`, 422, "invalid_schedule", "task.payload_base64:"},
		{"bad timeout", `{"cron":"@hourly","task":{"type":"x","timeout":"soon"}}`, 422, "invalid_schedule", "task.timeout:"},
		{"bad priority", `{"cron":"@hourly","task":{"type":"x","priority":5000}}`, 422, "invalid_schedule", "task.priority:"},
		{"bad max_attempts type", `{"cron":"@hourly","task":{"type":"x","max_attempts":"3"}}`, 422, "invalid_schedule", "task.max_attempts:"},
		{"unknown field", `{"cron":"@hourly","task":{"type":"x"},"bogus":1}`, 400, "unknown_field", ""},
		{"unknown task field", `{"cron":"@hourly","task":{"type":"x","delay":"1s"}}`, 400, "unknown_field", ""},
		{"not JSON", `{"cron":`, 400, "invalid_json", ""},
		{"field name in another case", `{"Cron":"@hourly","task":{"type":"x"}}`, 400, "unknown_field", ""},
		{"task field name in another case", `{"cron":"@hourly","task":{"Type":"x"}}`, 400, "unknown_field", ""},
		{"field given twice", `{"cron":"@hourly","cron":"@daily","task":{"type":"x"}}`, 400, "invalid_json", ""},
		{"task field given twice", `{"cron":"@hourly","task":{"type":"x","type":"y"}}`, 400, "invalid_json", ""},
		{"unpaired surrogate in cron", `{"cron":"@hourly\ud800","task":{"type":"x"}}`, 422, "invalid_schedule", "cron:"},
		{"unpaired surrogate in a header", `{"cron":"@hourly","task":{"type":"x","headers":{"a":"\udc00x"}}}`, 422, "invalid_schedule", "task.headers:"},
		{"invalid UTF-8 in the payload", "{\"cron\":\"@hourly\",\"task\":{\"type\":\"x\",\"payload\":{\"a\":[\"\xff\"]}}}", 422, "invalid_schedule", "task.payload:"},
		{"unpaired surrogate in the payload", `{"cron":"@hourly","task":{"type":"x","payload":{"a":"\ud800\u0041"}}}`, 422, "invalid_schedule", "task.payload:"},
		{"an array", `[]`, 400, "invalid_json", ""},
		{"trailing data", `{"cron":"@hourly","task":{"type":"x"}} {}`, 400, "invalid_json", ""},
		{"record too large", `{"cron":"@hourly","task":{"type":"x","payload_base64":"` + strings.Repeat("QUFB", 1000) + `"}}`, 413, "record_too_large", "task:"},
		{"body too large", `{"cron":"@hourly","task":{"type":"x","payload_base64":"` + big + `"}}`, 413, "too_large", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, id := range []string{"keep", "new"} {
				got := app.do("PUT", "/v1/schedules/"+id, c.body)
				if got.Status != c.status || got.errCode() != c.code || !strings.HasPrefix(got.errMessage(), c.msg) {
					t.Errorf("PUT %s %s: %d %s; want %d %s %q...", id, wireTrunc(c.body), got.Status, got.Raw, c.status, c.code, c.msg)
				}
			}
		})
	}
	// The unknown field is named.
	for field, body := range map[string]string{
		"bogus":     `{"cron":"@hourly","task":{"type":"x"},"bogus":1}`,
		"Cron":      `{"Cron":"@hourly","task":{"type":"x"}}`,
		"task.Type": `{"cron":"@hourly","task":{"Type":"x"}}`,
	} {
		if got := app.do("PUT", "/v1/schedules/new", body); !strings.Contains(got.errMessage(), `"`+field+`"`) {
			t.Errorf("unknown field %s not named: %s", field, got.Raw)
		}
	}
	// Not JSON content: 415.
	h := http.Header{"Content-Type": {"text/plain"}}
	if got := app.doHeader("PUT", "/v1/schedules/new", `{"cron":"@hourly","task":{"type":"x"}}`, h); got.Status != 415 {
		t.Errorf("text/plain: %d %s", got.Status, got.Raw)
	}
	// Bad ids in the path: 422 naming the id, for every operation.
	for _, id := range []string{"a%20b", "a@b", "a%2Fb", strings.Repeat("x", 129)} {
		for _, c := range []struct{ method, path, body string }{
			{"PUT", "/v1/schedules/" + id, `{"cron":"@hourly","task":{"type":"x"}}`},
			{"GET", "/v1/schedules/" + id, ""},
			{"DELETE", "/v1/schedules/" + id, ""},
			{"POST", "/v1/schedules/" + id + "/pause", ""},
			{"POST", "/v1/schedules/" + id + "/resume", ""},
		} {
			if got := app.do(c.method, c.path, c.body); got.Status != 422 || got.errCode() != "invalid_schedule" || !strings.HasPrefix(got.errMessage(), "id:") {
				t.Errorf("%s %s: %d %s", c.method, wireTrunc(c.path), got.Status, got.Raw)
			}
		}
	}
	// The list takes limit and cursor only.
	if got := app.do("GET", "/v1/schedules?bogus=5", ""); got.Status != 400 || got.errCode() != "unknown_field" || !strings.Contains(got.errMessage(), "bogus") {
		t.Errorf("list with an unknown parameter: %d %s", got.Status, got.Raw)
	}

	if after := etcdSnapshot(t, cli, ns); fmt.Sprint(after) != fmt.Sprint(snap) {
		t.Fatalf("bad input changed etcd: %v, was %v", after, snap)
	}
	// Strings are checked, not payload keys: a paired surrogate, a repeated
	// payload key or header name (the last value wins) are fine.
	if got := app.do("PUT", "/v1/schedules/ok", `{"cron":"@hourly","task":{"type":"x","payload":{"smile":"\ud83d\ude00","a":1,"a":2},"headers":{"h":"1","h":"2"}}}`); got.Status != 201 {
		t.Errorf("valid spec: %d %s", got.Status, got.Raw)
	}
	got := decodeView(t, app.do("GET", "/v1/schedules/keep", ""))
	if got.Revision != keep.Revision || got.Cron != keep.Cron || string(got.Task) != string(keep.Task) || !got.UpdatedAt.Equal(keep.UpdatedAt) {
		t.Fatalf("the schedule changed: %+v, was %+v", got, keep)
	}
}

func wireTrunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// TestSchedulesWithoutEtcd: without DQ_ETCD_ENDPOINTS every schedule
// endpoint answers 503 naming the setting (bad input is still 4xx).
func TestSchedulesWithoutEtcd(t *testing.T) {
	r := startRedis(t)
	app := startApp(t, testConfig(t, r.Addr))
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/schedules", ""},
		{"PUT", "/v1/schedules/x", `{"cron":"@hourly","task":{"type":"x"}}`},
		{"GET", "/v1/schedules/x", ""},
		{"DELETE", "/v1/schedules/x", ""},
		{"POST", "/v1/schedules/x/pause", ""},
		{"POST", "/v1/schedules/x/resume", ""},
	} {
		got := app.do(c.method, c.path, c.body)
		if got.Status != 503 || got.errCode() != "unavailable" || !strings.Contains(got.errMessage(), "DQ_ETCD_ENDPOINTS") {
			t.Errorf("%s %s without etcd: %d %s", c.method, c.path, got.Status, got.Raw)
		}
	}
	if got := app.do("PUT", "/v1/schedules/x", `{"cron":"bad","task":{"type":"x"}}`); got.Status != 422 {
		t.Errorf("bad spec without etcd: %d %s", got.Status, got.Raw)
	}
}

// TestSchedulesEtcdDown: with etcd stopped every schedule endpoint answers
// 503 (never 4xx, never 500) within the etcd timeout, and works again
// once etcd is back.
func TestSchedulesEtcdDown(t *testing.T) {
	app, e, _ := startScheduleApp(t)
	if got := app.do("PUT", "/v1/schedules/x", `{"cron":"@hourly","task":{"type":"x"}}`); got.Status != 201 {
		t.Fatalf("create: %d %s", got.Status, got.Raw)
	}
	e.Stop(t)
	cases := []struct{ method, path, body string }{
		{"GET", "/v1/schedules", ""},
		{"PUT", "/v1/schedules/x", `{"cron":"@daily","task":{"type":"x"}}`},
		{"PUT", "/v1/schedules/y", `{"cron":"@daily","task":{"type":"x"}}`},
		{"GET", "/v1/schedules/x", ""},
		{"DELETE", "/v1/schedules/x", ""},
		{"POST", "/v1/schedules/x/pause", ""},
		{"POST", "/v1/schedules/x/resume", ""},
	}
	replies := make([]quietReply, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = app.doQuiet(c.method, c.path, c.body)
		}()
	}
	wg.Wait()
	for i, c := range cases {
		got := replies[i]
		if got.err != nil {
			t.Errorf("%s %s with etcd down: %v", c.method, c.path, got.err)
			continue
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(got.Raw, &body)
		if got.Status != 503 || body.Error.Code != "unavailable" || !strings.Contains(body.Error.Message, "etcd") {
			t.Errorf("%s %s with etcd down: %d %s", c.method, c.path, got.Status, got.Raw)
		}
	}
	e.Restart(t)
	testenv.WaitFor(t, 15*time.Second, "the schedule readable again", func() bool {
		got := app.doQuiet("GET", "/v1/schedules/x", "")
		return got.err == nil && got.Status == 200
	})
	if got := app.do("GET", "/v1/schedules/x", ""); decodeView(t, got).Cron != "@hourly" {
		t.Fatalf("after the outage: %s", got.Raw)
	}
}

// FuzzScheduleSpecBody: any PUT body is either a spec that compiles or a
// 400/422 naming what is wrong; never a panic, never an answer that
// blames the infrastructure (503) or the server (500).
func FuzzScheduleSpecBody(f *testing.F) {
	for _, seed := range []string{
		`{"cron":"*/5 * * * * *","timezone":"Europe/Berlin","task":{"type":"x","payload":{"a":[1,"b"]},"headers":{"h":"v"}},"catchup":"all"}`,
		`{"cron":"@every 90s","task":{"type":"x","payload_base64":"AAE="},"start_at":"2030-01-01T00:00:00Z","end_at":"2031-01-01T00:00:00+01:00"}`,
		`{"cron":"0 0 2 * * *","task":{"type":"x","timeout":"1s","max_attempts":3,"priority":-5,"topic":"t","key":"k"},"paused":true}`,
		`{"Cron":"@daily","task":{"type":"x"}}`, `{"cron":"@daily","cron":"@daily"}`, `{"cron":"\ud800"}`, `[]`, `null`, `{`, ``,
		`{"cron":"@daily","task":null}`, `{"cron":"@daily","task":{"type":"x","headers":{"a":null}}}`, `{"cron":5}`, `{"start_at":"yesterday"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"cron":"@every 1h","task":{"type":"t"},"start_at":"2026-01-01T00:00:00+24:00"}`))
	f.Add([]byte(`{"cron":"@every 1h","task":{"type":"t"},"end_at":"1971-01-01T00:00:00-23:59"}`))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		spec, err := schedule.DecodeSpec(body, now)
		if err != nil {
			e := scheduleInputError("x", err)
			if e == nil || (e.Status != 400 && e.Status != 422) {
				t.Fatalf("%q: %+v (%v)", body, e, err)
			}
			if e.Message == "" {
				t.Fatalf("%q: no message", body)
			}
			return
		}
		c, err := schedule.Compile(spec)
		if err != nil {
			t.Fatalf("%q: decoded but does not compile: %v", body, err)
		}
		c.NextN(time.Unix(1900000000, 0), 3)
		if _, err := json.Marshal(spec); err != nil {
			t.Fatalf("%q: decoded but does not encode (the store would fail with a 5xx): %v", body, err)
		}
	})
}
