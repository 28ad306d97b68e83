package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestBatchMixed: one batch with good and bad items; each item gets its
// own result, in order, and a bad item does not fail the others.
func TestBatchMixed(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	for _, b := range []string{`{"id":"same","type":"x","payload":1,"delay":"1h"}`, `{"id":"up","type":"x","payload":1,"delay":"1h"}`, `{"id":"gone","type":"x","delay":"1h"}`} {
		if rp := app.do("POST", "/v1/tasks", b); rp.Status != 201 {
			t.Fatalf("set-up: %d %s", rp.Status, rp.Raw)
		}
	}
	if rp := app.do("DELETE", "/v1/tasks/gone", ""); rp.Status != 200 {
		t.Fatalf("set-up cancel: %d %s", rp.Status, rp.Raw)
	}

	items := []struct {
		body    string
		state   string // or
		outcome string
		code    string // error code
	}{
		{`{"id":"new1","type":"x","payload":{"a": 1},"delay":"1h"}`, "scheduled", "created", ""},
		{`{"id":"bad1"}`, "", "", "invalid_task"},
		{`{"id":"same","type":"x","payload":1,"delay":"1h"}`, "scheduled", "unchanged", ""},
		{`{"id":"bad2","type":"x","delai":"1h"}`, "", "", "unknown_field"},
		{`{"id":"up","type":"x","payload":2,"delay":"1h"}`, "scheduled", "updated", ""},
		{`17`, "", "", "invalid_json"},
		{`{"id":"gone","type":"x","payload":9}`, "", "", "conflict"},
		{`{"id":"bad3","type":"x","delay":"-1s"}`, "", "", "invalid_task"},
		{`{"id":"twice","type":"x","payload":"v1","delay":"1h"}`, "scheduled", "created", ""},
		{`{"id":"twice","type":"x","payload":"v2","delay":"2h"}`, "scheduled", "updated", ""},
		{`{"id":"bad4","type":"x","payload":1,"payload_base64":"AA=="}`, "", "", "invalid_task"},
		{`{"type":"generated","delay":"1h"}`, "scheduled", "created", ""},
	}
	bodies := make([]string, len(items))
	for i, it := range items {
		bodies[i] = it.body
	}
	rp := app.do("POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(bodies, ",")+`]}`)
	if rp.Status != 200 {
		t.Fatalf("batch: %d %s", rp.Status, rp.Raw)
	}
	var resp struct {
		Results []struct {
			ID, State, Outcome string
			Shard              *int
			Error              *struct {
				Code, Message string
				Status        int
			}
		}
	}
	if err := json.Unmarshal(rp.Raw, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(items) {
		t.Fatalf("%d results for %d tasks: %s", len(resp.Results), len(items), rp.Raw)
	}
	for i, it := range items {
		res := resp.Results[i]
		if it.code != "" {
			if res.Error == nil || res.Error.Code != it.code || res.Error.Message == "" {
				t.Errorf("item %d %s: want error %s, got %+v", i, it.body, it.code, res)
				continue
			}
			// the status the task gets alone (POST /v1/tasks)
			if alone := app.do("POST", "/v1/tasks", it.body); res.Error.Status != alone.Status {
				t.Errorf("item %d %s: status %d in the batch, %d alone", i, it.body, res.Error.Status, alone.Status)
			}
			continue
		}
		if res.Error != nil || res.State != it.state || res.Outcome != it.outcome || res.Shard == nil {
			t.Errorf("item %d %s: want %s/%s, got %+v", i, it.body, it.state, it.outcome, res)
		}
	}
	for id, payload := range map[string]string{"new1": `{"a": 1}`, "same": "1", "up": "2", "twice": `"v2"`, "gone": ""} {
		tk, err := st.Get(t.Context(), id)
		if err != nil || string(tk.Payload) != payload {
			t.Errorf("%s: %+v %v, want payload %s", id, tk, err, payload)
		}
	}
	if _, err := st.Get(t.Context(), resp.Results[len(items)-1].ID); err != nil {
		t.Errorf("generated id: %v", err)
	}
	for _, id := range []string{"bad1", "bad2", "bad3", "bad4"} {
		if _, err := st.Get(t.Context(), id); !errors.Is(err, redisstore.ErrNotFound) {
			t.Errorf("%s stored: %v", id, err)
		}
	}
	if rp := app.do("POST", "/v1/tasks/batch", `{"tasks":[]}`); rp.Status != 200 || string(rp.Raw) != "{\"results\":[]}\n" {
		t.Errorf("empty batch: %d %s", rp.Status, rp.Raw)
	}
}

// TestScheduleJournaledWhileDraining: while the journal still holds
// entries, a new submission of the same id is journaled behind them
// instead of going to Redis first, so the replay cannot overwrite it with
// an older version.
func TestScheduleJournaledWhileDraining(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app, err := New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The compensator is not running yet: the journal cannot drain.
	old := &task.Task{ID: "o1", Type: "x", Payload: []byte(`"old"`), PayloadJSON: true, DueAt: time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)}
	app.core.appendJournal(t.Context(), []redisstore.Submit{{Task: old}}, []int{0}, []uint8{whyUnavailable}, make([]wire.Scheduled, 1), true)

	req := httptest.NewRequest("POST", "/v1/tasks", strings.NewReader(`{"id":"o1","type":"x","payload":"new","delay":"1h"}`))
	req.Header.Set("Content-Type", "application/json")
	w := serveRecorded(app.Handler(), req)
	if w.Code != http.StatusAccepted {
		t.Fatalf("schedule while draining: %d %s", w.Code, w.Body)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	testenv.WaitFor(t, 10*time.Second, "journal drained", func() bool { return app.JournalDepth() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tk, err := openStore(t, r.Client(t), cfg).Get(t.Context(), "o1")
	if err != nil || string(tk.Payload) != `"new"` {
		t.Fatalf("o1: %+v %v, want the newer payload", tk, err)
	}
}
