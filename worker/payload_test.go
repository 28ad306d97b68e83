package worker_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// A payload encoded by client.JSONPayload decodes with worker.JSON in the
// handler, byte for byte through Redis and Kafka; one that does not fit
// the type kills its task at once (the decode error is Permanent) with the
// decode error as its reason.
func TestJSONPayloadRoundTrip(t *testing.T) {
	type order struct {
		ID    string            `json:"id"`
		Note  string            `json:"note"`
		Items []int             `json:"items"`
		Tags  map[string]string `json:"tags"`
	}
	want := order{ID: "42", Note: "fish & chips <hot>", Items: []int{1, 2}, Tags: map[string]string{"a": "b"}}
	payload, err := client.JSONPayload(want)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	got := make(chan order, 1)
	start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("order", func(_ context.Context, tk *worker.Task) error {
			o, err := worker.JSON[order](tk)
			if err != nil {
				return err
			}
			if !bytes.Equal(tk.Payload, payload) {
				t.Errorf("payload %s, want %s as sent", tk.Payload, payload)
			}
			got <- o
			return nil
		})
	})
	e.Firer.Start(t)
	good := &task.Task{ID: "good", Type: "order", Payload: payload, PayloadJSON: true}
	bad := &task.Task{ID: "bad", Type: "order", Payload: []byte(`{"id":42}`), PayloadJSON: true, MaxAttempts: 5}
	worktest.Schedule(t, e.Store, good, bad)
	e.WaitState(t, 20*time.Second, task.StateSucceeded, "good")
	if o := <-got; o.ID != want.ID || o.Note != want.Note || len(o.Items) != 2 || o.Tags["a"] != "b" {
		t.Errorf("decoded %+v, want %+v", o, want)
	}
	e.WaitState(t, 20*time.Second, task.StateDead, "bad")
	d, err := e.Store.Get(t.Context(), "bad")
	if err != nil {
		t.Fatal(err)
	}
	if d.Attempt != 1 || !strings.Contains(d.LastError, `decode payload of task "bad"`) ||
		!strings.Contains(d.LastError, "cannot unmarshal number") {
		t.Errorf("bad: dead at attempt %d with %q, want attempt 1 with the decode error", d.Attempt, d.LastError)
	}
}
