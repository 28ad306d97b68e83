package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/redisstore"
)

// TestTaskReceiptDecoding: the fire receipt of a task decodes from its
// pinned JSON names (partition and offset 0 included), for one task and
// in a listing; a task without one has HasReceipt false and zero fields.
func TestTaskReceiptDecoding(t *testing.T) {
	const withReceipt = `{"id":"d-1","type":"crm.sync","state":"delivered","due_at":"2030-01-01T10:00:00.000Z","attempt":1,"shard":3,` +
		`"topic":"crm.events","max_attempts":10,"priority":0,"fired_at":"2030-01-01T10:00:00.042Z","partition":0,"offset":0,` +
		`"fired_attempt":1,"fired_due_at":"2030-01-01T10:00:00.000Z","late_ms":42,"leader_token":7}`
	const without = `{"id":"s-1","type":"crm.sync","state":"scheduled","due_at":"2030-01-01T10:00:00.000Z","attempt":1,"shard":3,"max_attempts":10,"priority":0}`
	mux := http.NewServeMux()
	answer := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	mux.HandleFunc("GET /v1/tasks/d-1", answer(withReceipt))
	mux.HandleFunc("GET /v1/tasks/s-1", answer(without))
	mux.HandleFunc("GET /v1/tasks", answer(`{"tasks":[`+withReceipt+`,`+without+`]}`))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := client.New(srv.URL)

	due := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	check := func(what string, ti client.TaskInfo, receipt bool) {
		t.Helper()
		if !receipt {
			if ti.HasReceipt() || !ti.FiredAt.IsZero() || !ti.FiredDueAt.IsZero() || ti.FiredAttempt != 0 || ti.LeaderToken != 0 || ti.LateMs != 0 {
				t.Errorf("%s: a receipt without one: %+v", what, ti)
			}
			return
		}
		if !ti.HasReceipt() || ti.State != client.StateDelivered || !ti.FiredAt.Equal(due.Add(42*time.Millisecond)) ||
			!ti.FiredDueAt.Equal(due) || ti.Partition != 0 || ti.Offset != 0 || ti.FiredAttempt != 1 || ti.LateMs != 42 || ti.LeaderToken != 7 {
			t.Errorf("%s: receipt %+v", what, ti)
		}
	}
	for id, receipt := range map[string]bool{"d-1": true, "s-1": false} {
		ti, err := c.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		check("get "+id, *ti, receipt)
	}
	p, err := c.ListTasks(t.Context(), client.ListOptions{State: client.StateDelivered})
	if err != nil || len(p.Tasks) != 2 {
		t.Fatalf("list: %+v %v", p, err)
	}
	check("listed d-1", p.Tasks[0].TaskInfo, true)
	check("listed s-1", p.Tasks[1].TaskInfo, false)
}

// TestTaskReceiptFromDaemon: a delivered task as a real daemon shows it
// (the store's receipt, through the API's JSON) reads back with its
// receipt in Get and in ListTasks{State: StateDelivered}.
func TestTaskReceiptFromDaemon(t *testing.T) {
	url, st := startDaemon(t, "")
	c := client.New(url)
	ctx := t.Context()
	if _, err := c.Schedule(ctx, client.Task{ID: "bridge-1", Type: "crm.sync", Topic: "crm.events", DueAt: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if ti, err := c.Get(ctx, "bridge-1"); err != nil || ti.HasReceipt() {
		t.Fatalf("before the fire: %+v %v", ti, err)
	}
	sh := st.Shard("bridge-1")
	tk, err := st.Take(ctx, sh, 1, 10, time.Minute)
	if err != nil || len(tk.Tasks) != 1 {
		t.Fatalf("take: %+v %v", tk, err)
	}
	f := tk.Tasks[0]
	firedAt := f.DueAt.Add(1500 * time.Millisecond)
	if _, err := st.SettleAcks(ctx, sh, 1, tk.Lease, nil, []redisstore.Ack{{ID: f.ID, Gen: f.Gen, Attempt: f.Attempt, DueAt: f.DueAt,
		FiredAt: firedAt, Partition: 0, Offset: 0, Token: 1, Delivered: true}}); err != nil {
		t.Fatal(err)
	}
	ti, err := c.Get(ctx, "bridge-1")
	if err != nil {
		t.Fatal(err)
	}
	// delivered tasks are found by walking the bucket hashes: a page may
	// be empty and still have a next one
	var listed []client.ListedTask
	for lt, err := range c.Tasks(ctx, client.ListOptions{State: client.StateDelivered}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, lt)
	}
	if len(listed) != 1 {
		t.Fatalf("list delivered: %+v", listed)
	}
	for what, got := range map[string]client.TaskInfo{"get": *ti, "list": listed[0].TaskInfo} {
		if got.State != client.StateDelivered || !got.HasReceipt() || !got.FiredAt.Equal(firedAt) || !got.FiredDueAt.Equal(f.DueAt) ||
			got.Partition != 0 || got.Offset != 0 || got.FiredAttempt != 1 || got.LateMs != 1500 || got.LeaderToken != 1 {
			t.Errorf("%s: %+v", what, got)
		}
	}
}
