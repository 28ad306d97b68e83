package daemon

import (
	"encoding/json"
	"testing"
	"time"
)

// TestResubmitSaysWhatWasKept: a re-submit answered "unchanged" says what
// of the stored task stood, alone and in a batch: "kept":"due_at" when a
// relative due time (another delay, or none) left the earlier due time in
// place; "kept":"state" when the task had ended (cancelled) and nothing
// was scheduled. An identical absolute re-submit and the other outcomes
// have no "kept".
func TestResubmitSaysWhatWasKept(t *testing.T) {
	r := startRedis(t)
	app := startApp(t, testConfig(t, r.Addr))
	at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z07:00")

	type want struct {
		status         int
		outcome, state string
		kept           string
		dueAt          string // "" = not checked
		dueAtUnchanged bool   // due_at is that of the item's first answer
	}
	steps := []struct {
		name, body string
		want       want
	}{
		{"create relative", `{"id":"r1","type":"x","delay":"1h"}`, want{201, "created", "scheduled", "", "", false}},
		{"another delay", `{"id":"r1","type":"x","delay":"3h"}`, want{200, "unchanged", "scheduled", "due_at", "", true}},
		{"no due time", `{"id":"r1","type":"x"}`, want{200, "unchanged", "scheduled", "due_at", "", true}},
		{"create absolute", `{"id":"a1","type":"x","due_at":"` + at + `"}`, want{201, "created", "scheduled", "", at, false}},
		{"same absolute", `{"id":"a1","type":"x","due_at":"` + at + `"}`, want{200, "unchanged", "scheduled", "", at, false}},
		{"updated", `{"id":"a1","type":"y","due_at":"` + at + `"}`, want{200, "updated", "scheduled", "", at, false}},
	}
	first := map[string]string{}
	check := func(t *testing.T, m map[string]any, w want) {
		t.Helper()
		id, _ := m["id"].(string)
		kept, hasKept := m["kept"]
		if m["outcome"] != w.outcome || m["state"] != w.state || (w.kept == "") == hasKept || (w.kept != "" && kept != w.kept) {
			t.Fatalf("answer %v, want outcome %s, state %s, kept %q", m, w.outcome, w.state, w.kept)
		}
		due, _ := m["due_at"].(string)
		if w.dueAt != "" && due != w.dueAt {
			t.Fatalf("due_at %s, want %s", due, w.dueAt)
		}
		if w.dueAtUnchanged && due != first[id] {
			t.Fatalf("due_at %s, want the first %s", due, first[id])
		}
		if _, ok := first[id]; !ok {
			first[id] = due
		}
	}
	for _, s := range steps {
		t.Run("single/"+s.name, func(t *testing.T) {
			rp := app.do("POST", "/v1/tasks", s.body)
			if rp.Status != s.want.status {
				t.Fatalf("status %d, want %d: %s", rp.Status, s.want.status, rp.Raw)
			}
			check(t, rp.JSON, s.want)
		})
	}

	// A cancelled task re-submitted with the same body: 200 unchanged,
	// state cancelled, "kept":"state" (absolute and relative alike).
	if rp := app.do("DELETE", "/v1/tasks/a1", ""); rp.Status != 200 {
		t.Fatalf("cancel: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("DELETE", "/v1/tasks/r1", ""); rp.Status != 200 {
		t.Fatalf("cancel: %d %s", rp.Status, rp.Raw)
	}
	cancelled := want{200, "unchanged", "cancelled", "state", "", true}
	for _, body := range []string{`{"id":"a1","type":"y","due_at":"` + at + `"}`, `{"id":"r1","type":"x","delay":"5m"}`} {
		rp := app.do("POST", "/v1/tasks", body)
		if rp.Status != 200 {
			t.Fatalf("re-submit cancelled: %d %s", rp.Status, rp.Raw)
		}
		check(t, rp.JSON, cancelled)
	}

	// The batch: the same answers item by item.
	batch := `{"tasks":[` +
		`{"id":"b1","type":"x","delay":"1h"},` +
		`{"id":"b1","type":"x","delay":"4h"},` +
		`{"id":"b2","type":"x","due_at":"` + at + `"},` +
		`{"id":"b2","type":"x","due_at":"` + at + `"},` +
		`{"id":"a1","type":"y","due_at":"` + at + `"},` +
		`{"id":"r1","type":"x"}]}`
	rp := app.do("POST", "/v1/tasks/batch", batch)
	if rp.Status != 200 {
		t.Fatalf("batch: %d %s", rp.Status, rp.Raw)
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(rp.Raw, &got); err != nil || len(got.Results) != 6 {
		t.Fatalf("batch answer %s: %v", rp.Raw, err)
	}
	for i, w := range []want{
		{0, "created", "scheduled", "", "", false},
		{0, "unchanged", "scheduled", "due_at", "", true},
		{0, "created", "scheduled", "", at, false},
		{0, "unchanged", "scheduled", "", at, false},
		cancelled,
		cancelled,
	} {
		check(t, got.Results[i], w)
	}
}
