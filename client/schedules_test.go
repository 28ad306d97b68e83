package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
)

// TestSchedules: the schedule methods against a real daemon and etcd:
// create, replace, read, list, pause, resume, delete; a bad spec is a 422
// naming the field; without etcd a 503.
func TestSchedules(t *testing.T) {
	url, _ := startOperatorDaemon(t, "tok", true)
	c := client.New(url, client.WithToken("tok"))
	ctx := t.Context()

	start := time.Date(2030, 3, 29, 0, 0, 0, 0, time.UTC)
	spec := client.ScheduleSpec{
		Cron:     "0 0 2 * * *",
		Timezone: "Europe/Berlin",
		Task: client.ScheduleTask{Type: "nightly.report", Payload: json.RawMessage(`{"to":"ops"}`), Topic: "reports",
			Headers: map[string]string{"team": "a"}, MaxAttempts: 3, Timeout: 90 * time.Second, Priority: 5},
		Catchup: client.CatchupNone,
		StartAt: start,
		EndAt:   start.AddDate(1, 0, 0),
	}
	s, err := c.PutSchedule(ctx, "nightly", spec)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Created || s.ID != "nightly" || s.Revision == 0 || s.CreatedAt.IsZero() || !s.LastTick.IsZero() || s.LastTaskID != "" {
		t.Fatalf("created: %+v", s)
	}
	got := s.ScheduleSpec
	if !got.StartAt.Equal(spec.StartAt) || !got.EndAt.Equal(spec.EndAt) {
		t.Fatalf("bounds: %v %v", got.StartAt, got.EndAt)
	}
	got.StartAt, got.EndAt = spec.StartAt, spec.EndAt
	if !reflect.DeepEqual(got, spec) {
		t.Fatalf("spec round trip:\n got %+v\nwant %+v", got, spec)
	}
	// The first ticks: 02:00 Berlin from start_at on; on 2030-03-31 DST
	// starts and 02:00 does not exist: that day has no tick.
	berlin, _ := time.LoadLocation("Europe/Berlin")
	var want []time.Time
	for _, d := range [][2]int{{3, 29}, {3, 30}, {4, 1}, {4, 2}, {4, 3}} {
		want = append(want, time.Date(2030, time.Month(d[0]), d[1], 2, 0, 0, 0, berlin))
	}
	if len(s.Next) != len(want) {
		t.Fatalf("next: %v", s.Next)
	}
	for i, at := range s.Next {
		if _, off := at.Zone(); !at.Equal(want[i]) || off != map[bool]int{true: 3600, false: 7200}[i < 2] {
			t.Fatalf("next[%d] = %s, want %s (in the zone's offset)", i, at, want[i])
		}
	}

	// Replace: not created, same created_at; defaults shown as effective.
	s2, err := c.PutSchedule(ctx, "nightly", client.ScheduleSpec{Cron: "@every 10s", Task: client.ScheduleTask{Type: "tick", PayloadBytes: []byte{0, 1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Created || !s2.CreatedAt.Equal(s.CreatedAt) || s2.Revision <= s.Revision || s2.Timezone != "UTC" || s2.Catchup != client.CatchupLast ||
		!reflect.DeepEqual(s2.Task.PayloadBytes, []byte{0, 1, 2}) || len(s2.Next) != 5 || s2.Next[1].Sub(s2.Next[0]) != 10*time.Second {
		t.Fatalf("replaced: %+v", s2)
	}
	g, err := c.GetSchedule(ctx, "nightly")
	if err != nil || g.Revision != s2.Revision || g.Cron != "@every 10s" || g.Created {
		t.Fatalf("get: %+v, %v", g, err)
	}

	if _, err := c.PutSchedule(ctx, "b", client.ScheduleSpec{Cron: "@daily", Task: client.ScheduleTask{Type: "x"}, Paused: true}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSchedules(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "b" || !list[0].Paused || list[1].ID != "nightly" {
		t.Fatalf("list: %+v, %v", list, err)
	}

	for _, step := range []struct {
		pause, paused, changed bool
	}{{true, true, true}, {true, true, false}, {false, false, true}, {false, false, false}} {
		var s *client.Schedule
		if step.pause {
			s, err = c.PauseSchedule(ctx, "nightly")
		} else {
			s, err = c.ResumeSchedule(ctx, "nightly")
		}
		if err != nil || s.Paused != step.paused || s.Changed != step.changed {
			t.Fatalf("pause %v: %+v, %v", step.pause, s, err)
		}
	}

	// The encoded view decodes to the same schedule.
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back client.Schedule
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, g) {
		t.Fatalf("json round trip: %s -> %+v, %v", b, back, err)
	}

	// Bad input: 422 naming the field; nothing stored.
	var ae *client.APIError
	_, err = c.PutSchedule(ctx, "bad", client.ScheduleSpec{Cron: "* * *", Task: client.ScheduleTask{Type: "x"}})
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != "invalid_schedule" || !strings.HasPrefix(ae.Message, "cron:") {
		t.Fatalf("bad cron: %v", err)
	}
	_, err = c.PutSchedule(ctx, "bad", client.ScheduleSpec{Cron: "@daily", Timezone: "Nowhere/City", Task: client.ScheduleTask{Type: "x"}})
	if !errors.As(err, &ae) || ae.Status != 422 || !strings.HasPrefix(ae.Message, "timezone:") {
		t.Fatalf("bad zone: %v", err)
	}
	if _, err := c.GetSchedule(ctx, "bad"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("bad schedule stored: %v", err)
	}
	if _, err := c.PutSchedule(ctx, "x", client.ScheduleSpec{Cron: "@daily", Task: client.ScheduleTask{Type: "x", Payload: json.RawMessage(`{`)}}); err == nil || errors.As(err, &ae) {
		t.Fatalf("invalid JSON payload: %v, want an error before the request", err)
	}
	for _, err := range []error{
		func() error { _, err := c.GetSchedule(ctx, ""); return err }(),
		func() error { _, err := c.PauseSchedule(ctx, ""); return err }(),
		c.DeleteSchedule(ctx, ""),
	} {
		if err == nil || errors.As(err, &ae) {
			t.Fatalf("empty id: %v", err)
		}
	}

	if err := c.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSchedule(ctx, "nightly"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := c.ResumeSchedule(ctx, "nightly"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("resume deleted: %v", err)
	}

	noEtcd, _ := startOperatorDaemon(t, "", false)
	if _, err := client.New(noEtcd).ListSchedules(ctx); !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(ae.Message, "DQ_ETCD_ENDPOINTS") {
		t.Fatalf("without etcd: %v", err)
	}
}

// fakeSchedules answers PUT and GET /v1/schedules/{id} like a daemon for
// the example (TestSchedules runs against a real one).
func fakeSchedules() *httptest.Server {
	mux := http.NewServeMux()
	view := `{"id":"nightly","cron":"0 0 2 * * *","timezone":"Europe/Berlin","catchup":"last","paused":false,` +
		`"task":{"type":"report.build","payload":{"scope":"day"}},` +
		`"created_at":"2030-03-28T12:00:00.000Z","updated_at":"2030-03-28T12:00:00.000Z","revision":42,` +
		`"next":["2030-03-29T02:00:00.000+01:00","2030-03-30T02:00:00.000+01:00","2030-04-01T02:00:00.000+02:00",` +
		`"2030-04-02T02:00:00.000+02:00","2030-04-03T02:00:00.000+02:00"],` +
		`"last_tick":null,"last_task_id":null`
	mux.HandleFunc("PUT /v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, view+`,"created":true}`)
	})
	return httptest.NewServer(mux)
}

// Run a report every night at 02:00 Berlin time. The tick of 2030-03-31
// does not exist (02:00 is skipped when daylight saving time starts), so
// that night has none.
func ExampleClient_PutSchedule() {
	srv := fakeSchedules()
	defer srv.Close()
	c := client.New(srv.URL, client.WithToken("secret"))

	s, err := c.PutSchedule(context.Background(), "nightly", client.ScheduleSpec{
		Cron:     "0 0 2 * * *",
		Timezone: "Europe/Berlin",
		Task:     client.ScheduleTask{Type: "report.build", Payload: json.RawMessage(`{"scope":"day"}`)},
	})
	if err != nil {
		fmt.Println("put:", err) // 422 invalid_schedule naming the field, 503 without etcd
		return
	}
	fmt.Println(s.ID, "created:", s.Created, "catchup:", s.Catchup)
	for _, t := range s.Next {
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// nightly created: true catchup: last
	// 2030-03-29T02:00:00+01:00
	// 2030-03-30T02:00:00+01:00
	// 2030-04-01T02:00:00+02:00
	// 2030-04-02T02:00:00+02:00
	// 2030-04-03T02:00:00+02:00
}
