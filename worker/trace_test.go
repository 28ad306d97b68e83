package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/internal/tracing/tracingtest"
	"github.com/delayq/delayq/worker"
)

// attemptOf is the delayq.attempt span of task id, if ended.
func attemptOf(spans tracetest.SpanStubs, id string) (tracetest.SpanStub, bool) {
	for _, s := range spans {
		if s.Name == "delayq.attempt" && tracingtest.Attr(s, "delayq.task.id").AsString() == id {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

const (
	traceID  = "0af7651916cd43dd8448eb211c80319c"
	parentID = "b7ad6b7169203331"
	tp       = "00-" + traceID + "-" + parentID + "-01"
)

func tracedTask(id, typ string) *task.Task {
	tk := newTask(id, typ)
	tk.Headers = map[string]string{"traceparent": tp, "tenant": "acme"}
	return tk
}

// With tracing on, a record that carries a traceparent runs in a
// delayq.attempt span, child of the record's context: a Go handler's
// context carries that span, its attributes and outcome say what ran and
// what became of it; a failure sets its status. A record without one
// makes no span, and its handler's context carries none.
func TestTraceAttemptSpan(t *testing.T) {
	spans := tracingtest.On(t)
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	var mu sync.Mutex
	seen := map[string]trace.SpanContext{}
	start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("order.cancel", func(ctx context.Context, tk *worker.Task) error {
			mu.Lock()
			seen[tk.ID] = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			if tk.ID == "bad" {
				return worker.Permanent(errBoom)
			}
			return nil
		})
	})
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, tracedTask("ok", "order.cancel"), tracedTask("bad", "order.cancel"),
		newTask("plain", "order.cancel"))
	e.WaitState(t, 15*time.Second, task.StateSucceeded, "ok", "plain")
	e.WaitState(t, 15*time.Second, task.StateDead, "bad")

	var ok, bad tracetest.SpanStub
	testenv.WaitFor(t, 10*time.Second, "attempt spans ended", func() bool {
		ss := spans()
		var fine, failed bool
		ok, fine = attemptOf(ss, "ok")
		bad, failed = attemptOf(ss, "bad")
		return fine && failed
	})
	for _, s := range []tracetest.SpanStub{ok, bad} {
		id := tracingtest.Attr(s, "delayq.task.id").AsString()
		if s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("%s: kind %v", id, s.SpanKind)
		}
		if got := s.Parent; got.TraceID().String() != traceID || got.SpanID().String() != parentID || !got.IsRemote() {
			t.Errorf("%s: parent %v, want the record's %s", id, got, tp)
		}
		if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("%s: trace %s", id, s.SpanContext.TraceID())
		}
		mu.Lock()
		hsc := seen[id]
		mu.Unlock()
		if !hsc.Equal(s.SpanContext) {
			t.Errorf("%s: the handler's context carries %v, want the attempt span %v", id, hsc, s.SpanContext)
		}
		for key, want := range map[string]string{"delayq.task.type": "order.cancel", "messaging.system": "kafka",
			"messaging.destination.name": task.DefaultTopic} {
			if got := tracingtest.Attr(s, key).AsString(); got != want {
				t.Errorf("%s: %s = %q, want %q", id, key, got, want)
			}
		}
		if tracingtest.Attr(s, "delayq.attempt").AsInt64() != 1 || tracingtest.Attr(s, "delayq.max_attempts").AsInt64() < 1 {
			t.Errorf("%s: attempt %v of %v", id, tracingtest.Attr(s, "delayq.attempt").String(), tracingtest.Attr(s, "delayq.max_attempts").String())
		}
		if tracingtest.Attr(s, "delayq.lateness_ms").Type() != attribute.INT64 || tracingtest.Attr(s, "delayq.gen").Type() != attribute.INT64 {
			t.Errorf("%s: no lateness or gen: %v", id, s.Attributes)
		}
		var events []string
		for _, ev := range s.Events {
			events = append(events, ev.Name)
		}
		if len(events) != 3 || events[0] != "claimed" || events[1] != "handled" || events[2] != "finished" {
			t.Errorf("%s: events %v", id, events)
		}
	}
	if got := tracingtest.Attr(ok, "delayq.outcome").AsString(); got != "succeeded" || ok.Status.Code != codes.Unset {
		t.Errorf("ok: outcome %q, status %v", got, ok.Status)
	}
	if got := tracingtest.Attr(bad, "delayq.outcome").AsString(); got != "dead" || bad.Status.Code != codes.Error || bad.Status.Description != errBoom.Error() {
		t.Errorf("bad: outcome %q, status %v", got, bad.Status)
	}
	// the lag and duration histograms have the trace id as an exemplar
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exemplars := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" && l.GetValue() == traceID {
						exemplars[mf.GetName()] = true
					}
				}
			}
		}
	}
	for _, name := range []string{"delayq_work_e2e_lag_seconds", "delayq_work_handler_duration_seconds"} {
		if !exemplars[name] {
			t.Errorf("%s has no exemplar of the trace", name)
		}
	}
	// the dead letter carries the record's trace context
	dl := worktest.ReadTopic(t, e.Kafka, "dq.dead", 1, 10*time.Second)
	if got := deadHeader(dl[0].Headers, "traceparent"); got != tp {
		t.Errorf("dead letter traceparent %q, want %q", got, tp)
	}
	if _, made := attemptOf(spans(), "plain"); made {
		t.Error("a span for a record without a traceparent")
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["plain"].IsValid() {
		t.Errorf("plain: the handler's context carries %v", seen["plain"])
	}
}

// With tracing off, a Go handler's context still carries the record's
// trace context (a remote parent), so that its own spans continue the
// producer's trace.
func TestTraceOffHandlerContinuesTheRecord(t *testing.T) {
	if tracing.On() {
		t.Fatal("tracing is on")
	}
	e := newEnv(t)
	cfg, reg := e.config(t, "w1")
	got := make(chan trace.SpanContext, 2)
	start(t, cfg, reg, func(w *worker.Worker) {
		w.Handle("order.cancel", func(ctx context.Context, tk *worker.Task) error {
			got <- trace.SpanContextFromContext(ctx)
			return nil
		})
	})
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, tracedTask("ok", "order.cancel"))
	select {
	case sc := <-got:
		if sc.TraceID().String() != traceID || sc.SpanID().String() != parentID || !sc.IsRemote() || !sc.IsSampled() {
			t.Errorf("the handler's context carries %v, want the record's %s", sc, tp)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no handler ran")
	}
}

func deadHeader(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
