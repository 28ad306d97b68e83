package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/delayq/delayq/internal/schedule"
)

// Issue 40 (hostile clients): the number of schedules is capped
// (DQ_MAX_SCHEDULES), GET /v1/schedules pages, and an error that is
// neither bad input nor etcd's is a 500, never a 503 that clients retry
// forever.

// TestSchedulesLimit: a PUT creating a schedule beyond DQ_MAX_SCHEDULES
// answers 422 too_many_schedules and writes nothing; replacing, pausing and
// deleting stay allowed at the limit; concurrent creates never overshoot.
func TestSchedulesLimit(t *testing.T) {
	app, _, cli := startScheduleApp(t, func(c *Config) { c.MaxSchedules = 4 })
	ns := app.cfg.Namespace
	for i := range 4 {
		if got := app.do("PUT", fmt.Sprintf("/v1/schedules/s%d", i), `{"cron":"@daily","task":{"type":"x"}}`); got.Status != 201 {
			t.Fatalf("create s%d: %d %s", i, got.Status, got.Raw)
		}
	}
	snap := etcdSnapshot(t, cli, ns)
	got := app.do("PUT", "/v1/schedules/one-more", `{"cron":"@daily","task":{"type":"x"}}`)
	if got.Status != 422 || got.errCode() != "too_many_schedules" || !strings.Contains(got.errMessage(), "DQ_MAX_SCHEDULES") ||
		!strings.Contains(got.errMessage(), "4") {
		t.Fatalf("create beyond the limit: %d %s", got.Status, got.Raw)
	}
	if after := etcdSnapshot(t, cli, ns); fmt.Sprint(after) != fmt.Sprint(snap) {
		t.Fatalf("a refused create changed etcd: %v, was %v", after, snap)
	}
	if got := app.do("PUT", "/v1/schedules/s0", `{"cron":"@hourly","task":{"type":"x"}}`); got.Status != 200 {
		t.Fatalf("replace at the limit: %d %s", got.Status, got.Raw)
	}
	if got := app.do("POST", "/v1/schedules/s1/pause", ""); got.Status != 200 {
		t.Fatalf("pause at the limit: %d %s", got.Status, got.Raw)
	}
	if got := app.do("DELETE", "/v1/schedules/s2", ""); got.Status != 200 {
		t.Fatalf("delete: %d %s", got.Status, got.Raw)
	}
	// one free place, raced for by many: exactly one create wins
	var wg sync.WaitGroup
	codes := make([]string, 12)
	for i := range codes {
		wg.Go(func() {
			r := app.doQuiet("PUT", fmt.Sprintf("/v1/schedules/race%d", i), `{"cron":"@daily","task":{"type":"x"}}`)
			switch {
			case r.err != nil:
				codes[i] = r.err.Error()
			case r.Status == 201:
				codes[i] = "created"
			default:
				var body struct {
					Error struct{ Code string } `json:"error"`
				}
				_ = json.Unmarshal(r.Raw, &body)
				codes[i] = fmt.Sprintf("%d %s", r.Status, body.Error.Code)
			}
		})
	}
	wg.Wait()
	created := 0
	for _, c := range codes {
		switch c {
		case "created":
			created++
		case "422 too_many_schedules", "503 unavailable": // unavailable: etcd busy, retryable
		default:
			t.Errorf("racing create: %s", c)
		}
	}
	if n := len(app.walkSchedules(t, 100)); created != 1 || n != 4 {
		t.Fatalf("racing for one place: %d created, %d schedules (limit 4): %v", created, n, codes)
	}
}

// walkSchedules walks GET /v1/schedules page by page (limit a page) and
// returns the ids in the order seen.
func (a *testApp) walkSchedules(t testing.TB, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 1000 {
		path := fmt.Sprintf("/v1/schedules?limit=%d", limit)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		got := a.do("GET", path, "")
		var p struct {
			Schedules  []schedView `json:"schedules"`
			NextCursor *string     `json:"next_cursor"`
		}
		if got.Status != 200 || json.Unmarshal(got.Raw, &p) != nil || p.Schedules == nil {
			t.Fatalf("GET %s: %d %s", path, got.Status, got.Raw)
		}
		if len(p.Schedules) > limit {
			t.Fatalf("GET %s: %d schedules on a page of %d", path, len(p.Schedules), limit)
		}
		for _, s := range p.Schedules {
			ids = append(ids, s.ID)
		}
		if p.NextCursor == nil {
			return ids
		}
		if *p.NextCursor == "" || *p.NextCursor == cursor {
			t.Fatalf("GET %s: next_cursor %q", path, *p.NextCursor)
		}
		cursor = *p.NextCursor
	}
	t.Fatal("the walk does not end")
	return nil
}

// TestSchedulesListPages: GET /v1/schedules pages by limit and cursor;
// a walk sees each schedule that exists throughout it exactly once, in
// id order, with concurrent creates (seen or not); bad parameters answer
// 422 naming them.
func TestSchedulesListPages(t *testing.T) {
	app, _, _ := startScheduleApp(t)
	var want []string
	for i := range 23 {
		id := fmt.Sprintf("s%02d", i*2)
		want = append(want, id)
		if got := app.do("PUT", "/v1/schedules/"+id, `{"cron":"@daily","task":{"type":"x"}}`); got.Status != 201 {
			t.Fatalf("create %s: %d %s", id, got.Status, got.Raw)
		}
	}
	// the default page holds them all, without a cursor
	if got := app.do("GET", "/v1/schedules", ""); got.Status != 200 || len(got.JSON["schedules"].([]any)) != 23 || got.JSON["next_cursor"] != nil {
		t.Fatalf("one page: %d %s", got.Status, got.Raw)
	}
	if ids := app.walkSchedules(t, 5); !slices.Equal(ids, want) {
		t.Fatalf("walk by 5: %v, want %v", ids, want)
	}

	// creates while walking: odd ids, on both sides of the cursor
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := app.doQuiet("PUT", fmt.Sprintf("/v1/schedules/s%02d", (i*7%23)*2+1), `{"cron":"@daily","task":{"type":"x"}}`)
			if r.err != nil || (r.Status != 201 && r.Status != 200) {
				t.Errorf("concurrent create: %v %d %s", r.err, r.Status, r.Raw)
				return
			}
		}
	})
	ids := app.walkSchedules(t, 3)
	close(stop)
	wg.Wait()
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatalf("not each once, in id order: %v", ids)
	}
	for _, id := range want {
		if _, ok := slices.BinarySearch(ids, id); !ok {
			t.Errorf("%s not seen in a walk with concurrent creates: %v", id, ids)
		}
	}

	for _, c := range []struct{ query, field string }{
		{"limit=0", "limit:"}, {"limit=1001", "limit:"}, {"limit=x", "limit:"}, {"limit=-1", "limit:"},
		{"cursor=garbage!", "cursor:"}, {"cursor=" + url.QueryEscape(encodeScheduleCursor("a b")), "cursor:"},
		{"cursor=" + strings.Repeat("A", 5000), "cursor:"}, {"limit=1&limit=2", "limit:"},
	} {
		// (a parameter given twice is the strict query reader's 422, as for GET /v1/tasks)
		got := app.do("GET", "/v1/schedules?"+c.query, "")
		if got.Status != 422 || !strings.HasPrefix(got.errMessage(), c.field) {
			t.Errorf("GET /v1/schedules?%s: %d %s", wireTrunc(c.query), got.Status, got.Raw)
		}
	}
}

// TestScheduleErrorBlamesNoOneElse: bad input is 4xx, etcd's failures
// 503, and any other error (a bug: a spec that validated but did not
// encode) 500 — never 503 "etcd", which clients retry forever.
func TestScheduleErrorBlamesNoOneElse(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := &App{log: log, core: &core{log: log}}
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("encode schedule x: %w", errors.New("json: error calling MarshalJSON for type time.Time")), 500, "internal"},
		{&schedule.EtcdError{Op: "write schedule x", Err: errors.New("etcdserver: request timed out")}, 503, "unavailable"},
		{fmt.Errorf("write schedule x: %w", schedule.ErrBusy), 503, "unavailable"},
		{&schedule.FieldError{Field: "end_at", Reason: "in the past"}, 422, "invalid_schedule"},
		{fmt.Errorf("%w: 5 of 5", schedule.ErrTooMany), 422, "too_many_schedules"},
		{fmt.Errorf("%w: x", schedule.ErrNotFound), 404, "not_found"},
	}
	for _, c := range cases {
		e := a.scheduleError("x", c.err)
		if e.Status != c.status || e.Code != c.code {
			t.Errorf("scheduleError(%v) = %d %s %s, want %d %s", c.err, e.Status, e.Code, e.Message, c.status, c.code)
		}
	}
}
