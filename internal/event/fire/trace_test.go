package fire

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/tracing"
)

// The trace context the traced tasks of these tests carry (sampled).
const (
	testTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParentID = "00f067aa0ba902b7"
	testParent   = "00-" + testTraceID + "-" + testParentID + "-01"
	testState    = "vendor=x"
)

// traceOn turns tracing on until the test ends, its spans going to the
// returned exporter; flush makes the ended spans reach it. The tests that
// use it must not be parallel: tracing.On is the process'.
func traceOn(t *testing.T) (exp *tracetest.InMemoryExporter, flush func()) {
	t.Helper()
	prev := otel.GetTracerProvider()
	exp = tracetest.NewInMemoryExporter()
	shutdown, err := tracing.Setup(t.Context(), tracing.Options{Service: "t", Exporter: exp}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	if !ok || !tracing.On() {
		t.Fatal("tracing.Setup with an exporter did not turn tracing on")
	}
	// after the pollers stopped (cleanups run last first)
	t.Cleanup(func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		otel.SetTracerProvider(prev)
	})
	return exp, func() {
		if err := tp.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// spansNamed is the spans of exp named name; with id, only those of that
// task.
func spansNamed(exp *tracetest.InMemoryExporter, name, id string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.Name == name && (id == "" || attrOf(s, "delayq.task.id").AsString() == id) {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s tracetest.SpanStub, key string) attribute.Value {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

func hasEvent(s tracetest.SpanStub, name string) bool {
	for _, e := range s.Events {
		if e.Name == name {
			return true
		}
	}
	return false
}

// With tracing on, every task that carries a trace context gets a
// delayq.fire span (producer), a child of it, that its record names as
// parent; a task without one gets none and its record no traceparent; the
// take's delayq.fire.batch span (a root) links to the fire spans.
func TestFireSpansParentTheRecordsOfTracedTasks(t *testing.T) {
	exp, flush := traceOn(t)
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	const token = 77
	runPoller(t, NewPoller(f.config(0, token)))

	var traced, plain []*task.Task
	for i := range 5 {
		traced = append(traced, &task.Task{ID: fmt.Sprintf("tr-%d", i), Type: "trace.me", Payload: []byte("p"),
			Headers: map[string]string{record.HeaderTraceparent: testParent, record.HeaderTracestate: testState, "x-own": "1"}})
	}
	for i := range 3 {
		tk := &task.Task{ID: fmt.Sprintf("plain-%d", i), Type: "t", Payload: []byte("p")}
		if i == 1 {
			tk.Headers = map[string]string{"x-own": "1"}
		}
		plain = append(plain, tk)
	}
	all := append(append([]*task.Task{}, traced...), plain...)
	schedule(t, f.store, 200*time.Millisecond, all...)
	testenv.WaitFor(t, 15*time.Second, "every task in Kafka", func() bool { return recs.Distinct() >= len(all) })
	testenv.WaitFor(t, 10*time.Second, "a fire span per traced task", func() bool {
		flush()
		return len(spansNamed(exp, "delayq.fire", "")) >= len(traced)
	})

	fireIDs := map[trace.SpanID]bool{}
	for _, tk := range traced {
		ss := spansNamed(exp, "delayq.fire", tk.ID)
		if len(ss) != 1 {
			t.Fatalf("%s: %d fire spans, want 1", tk.ID, len(ss))
		}
		s := ss[0]
		fireIDs[s.SpanContext.SpanID()] = true
		stored, err := f.store.Get(t.Context(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s.SpanKind != trace.SpanKindProducer:
			t.Errorf("%s: kind %v, want producer", tk.ID, s.SpanKind)
		case s.SpanContext.TraceID().String() != testTraceID || s.Parent.SpanID().String() != testParentID || !s.Parent.IsRemote():
			t.Errorf("%s: span in trace %s under %s (remote %v), want under the task's %s", tk.ID,
				s.SpanContext.TraceID(), s.Parent.SpanID(), s.Parent.IsRemote(), testParent)
		case s.SpanContext.TraceState().String() != testState:
			t.Errorf("%s: tracestate %q, want the task's %q", tk.ID, s.SpanContext.TraceState(), testState)
		case s.Status.Code != codes.Unset:
			t.Errorf("%s: status %v", tk.ID, s.Status)
		case !hasEvent(s, "produced"):
			t.Errorf("%s: no produced event: %v", tk.ID, s.Events)
		case !s.StartTime.Before(s.EndTime):
			t.Errorf("%s: span from %s to %s", tk.ID, s.StartTime, s.EndTime)
		}
		for k, want := range map[string]attribute.Value{
			"delayq.task.type":           attribute.StringValue("trace.me"),
			"delayq.shard":               attribute.IntValue(0),
			"delayq.gen":                 attribute.Int64Value(int64(stored.Gen)),
			"delayq.attempt":             attribute.IntValue(1),
			"delayq.due_at":              attribute.Int64Value(stored.DueAt.UnixMilli()),
			"messaging.system":           attribute.StringValue("kafka"),
			"messaging.destination.name": attribute.StringValue(task.DefaultTopic),
			"delayq.fate":                attribute.StringValue(fateFired),
		} {
			if got := attrOf(s, k); got != want {
				t.Errorf("%s: %s = %v, want %v", tk.ID, k, got.String(), want.String())
			}
		}
		r := recs.Get(tk.ID)[0]
		firedAt := hdrInt(t, r, record.HeaderFiredAt)
		if late := attrOf(s, "delayq.lateness_ms").AsInt64(); late != firedAt-stored.DueAt.UnixMilli() || late < 0 {
			t.Errorf("%s: lateness %dms, fired at %d for due %d", tk.ID, late, firedAt, stored.DueAt.UnixMilli())
		}
		want := "00-" + testTraceID + "-" + s.SpanContext.SpanID().String() + "-01"
		if got := hdr(r, record.HeaderTraceparent); got != want {
			t.Errorf("%s: record traceparent %q, want the fire span's %q", tk.ID, got, want)
		}
		if got := hdr(r, record.HeaderTracestate); got != testState {
			t.Errorf("%s: record tracestate %q, want %q", tk.ID, got, testState)
		}
		if got := hdr(r, "x-own"); got != "1" {
			t.Errorf("%s: own header %q", tk.ID, got)
		}
		if len(s.Links) != 1 {
			t.Errorf("%s: %d links, want its batch's", tk.ID, len(s.Links))
		}
	}
	for _, tk := range plain {
		if ss := spansNamed(exp, "delayq.fire", tk.ID); len(ss) != 0 {
			t.Errorf("%s (no trace context): %d fire spans", tk.ID, len(ss))
		}
		if _, ok := testenv.Header(recs.Get(tk.ID)[0], record.HeaderTraceparent); ok {
			t.Errorf("%s (no trace context): its record has a traceparent", tk.ID)
		}
	}

	// The batch spans: roots, linked to every fire span, linked from them.
	batches := map[trace.SpanID]tracetest.SpanStub{}
	linked := map[trace.SpanID]bool{}
	tasks := int64(0)
	for _, b := range spansNamed(exp, "delayq.fire.batch", "") {
		batches[b.SpanContext.SpanID()] = b
		switch {
		case b.Parent.IsValid() || b.SpanKind != trace.SpanKindInternal:
			t.Errorf("batch span: parent %v, kind %v; want a root, internal", b.Parent, b.SpanKind)
		case attrOf(b, "delayq.shard") != attribute.IntValue(0) || attrOf(b, "delayq.token") != attribute.Int64Value(token):
			t.Errorf("batch span: attributes %v", b.Attributes)
		}
		tasks += attrOf(b, "delayq.tasks").AsInt64()
		for _, l := range b.Links {
			if !fireIDs[l.SpanContext.SpanID()] || l.SpanContext.TraceID().String() != testTraceID {
				t.Errorf("batch span links to %v, not a fire span", l.SpanContext)
			}
			linked[l.SpanContext.SpanID()] = true
		}
	}
	if tasks != int64(len(all)) {
		t.Errorf("batch spans count %d tasks, want %d", tasks, len(all))
	}
	if len(linked) != len(fireIDs) {
		t.Errorf("batch spans link to %d fire spans, want %d", len(linked), len(fireIDs))
	}
	for _, tk := range traced {
		s := spansNamed(exp, "delayq.fire", tk.ID)[0]
		if b, ok := batches[s.Links[0].SpanContext.SpanID()]; !ok {
			t.Errorf("%s: links to %v, not a batch span", tk.ID, s.Links[0].SpanContext)
		} else if s.StartTime != b.StartTime {
			t.Errorf("%s: starts at %s, its batch at %s (the take)", tk.ID, s.StartTime, b.StartTime)
		}
	}
}

// A task Kafka refuses for good (a missing topic) gets a fire span per
// try, each an error, parked until its grace ends, then dead; its
// dead-letter record names the last one as parent.
func TestFireSpansOfATaskMadeDead(t *testing.T) {
	exp, flush := traceOn(t)
	f := newFixture(t, 1)
	dead := f.kafka.Collect(t, "dq.dead")
	cfg := f.config(0, 5)
	cfg.PoisonGrace = 500 * time.Millisecond
	runPoller(t, NewPoller(cfg))
	tk := &task.Task{ID: "doomed", Type: "t", Topic: "no.such.topic", Payload: []byte("p"),
		Headers: map[string]string{record.HeaderTraceparent: testParent}}
	schedule(t, f.store, 0, tk)
	testenv.WaitFor(t, 15*time.Second, "the dead-letter record", func() bool { return dead.Distinct() >= 1 })
	var last tracetest.SpanStub
	testenv.WaitFor(t, 10*time.Second, "a dead fire span", func() bool {
		flush()
		for _, s := range spansNamed(exp, "delayq.fire", tk.ID) {
			if attrOf(s, "delayq.fate").AsString() == fateDead {
				last = s
				return true
			}
		}
		return false
	})
	ss := spansNamed(exp, "delayq.fire", tk.ID)
	if len(ss) < 2 {
		t.Errorf("%d fire spans, want one per try (parked, then dead)", len(ss))
	}
	for _, s := range ss {
		fate := attrOf(s, "delayq.fate").AsString()
		if s.Status.Code != codes.Error || attrOf(s, "delayq.refusal").AsString() != RefusedUnknownTopic ||
			fate != fateParked && fate != fateDead || s.Parent.SpanID().String() != testParentID {
			t.Errorf("fire span: status %v, fate %s, refusal %s, parent %s", s.Status, fate,
				attrOf(s, "delayq.refusal").String(), s.Parent.SpanID())
		}
	}
	want := "00-" + testTraceID + "-" + last.SpanContext.SpanID().String() + "-01"
	if got := hdr(dead.Get(tk.ID)[0], record.HeaderTraceparent); got != want {
		t.Errorf("dead-letter record traceparent %q, want the last fire span's %q", got, want)
	}
	if !hasEvent(last, "dead letter written") {
		t.Errorf("dead fire span: events %v", last.Events)
	}
}

// With tracing off the record carries the task's trace context exactly as
// the task has it.
func TestFireWithoutTracingKeepsTheTasksTraceContext(t *testing.T) {
	if tracing.On() {
		t.Fatal("tracing is on")
	}
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	runPoller(t, NewPoller(f.config(0, 9)))
	tk := &task.Task{ID: "off-1", Type: "t", Payload: []byte("p"),
		Headers: map[string]string{record.HeaderTraceparent: testParent, record.HeaderTracestate: testState}}
	schedule(t, f.store, 0, tk, &task.Task{ID: "off-2", Type: "t"})
	testenv.WaitFor(t, 15*time.Second, "every task in Kafka", func() bool { return recs.Distinct() >= 2 })
	r := recs.Get(tk.ID)[0]
	if got := hdr(r, record.HeaderTraceparent); got != testParent {
		t.Errorf("record traceparent %q, want the task's %q", got, testParent)
	}
	if got := hdr(r, record.HeaderTracestate); got != testState {
		t.Errorf("record tracestate %q, want the task's %q", got, testState)
	}
	if _, ok := testenv.Header(recs.Get("off-2")[0], record.HeaderTraceparent); ok {
		t.Error("a task without a trace context got a traceparent")
	}
}

// With tracing off a batch's trace is nil and its steps allocate nothing.
func TestFireTraceIsFreeWhenOff(t *testing.T) {
	if tracing.On() {
		t.Fatal("tracing is on")
	}
	b := &batch{errs: []error{nil}, dead: []bool{false}}
	p := &Poller{}
	allocs := testing.AllocsPerRun(100, func() {
		b.tr.produced(b)
		b.tr.poisoned(0, fateParked)
		b.tr.deadLetter(0, nil)
		b.tr.deadNotified(b.errs)
		p.endTrace(b, batchResult{})
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch with tracing off", allocs)
	}
}

// A batch span links to at most maxBatchLinks fire spans and counts the
// rest.
func TestFireBatchSpanCapsItsLinks(t *testing.T) {
	exp, flush := traceOn(t)
	const n = maxBatchLinks + 2
	var tasks []*task.Task
	for i := range n {
		tasks = append(tasks, &task.Task{ID: fmt.Sprintf("cap-%d", i), Type: "t",
			Headers: map[string]string{record.HeaderTraceparent: testParent}})
	}
	p := NewPoller(Config{Shard: 3, Token: 4})
	now := time.Now()
	b := p.encode(redisstore.Taken{Tasks: tasks}, now)
	p.startTrace(t.Context(), b, now)
	b.errs, b.stored = make([]error, n), true
	p.endTrace(b, batchResult{})
	flush()
	if ss := spansNamed(exp, "delayq.fire", ""); len(ss) != n {
		t.Fatalf("%d fire spans, want %d", len(ss), n)
	}
	bs := spansNamed(exp, "delayq.fire.batch", "")
	if len(bs) != 1 {
		t.Fatalf("%d batch spans", len(bs))
	}
	if got := len(bs[0].Links); got != maxBatchLinks {
		t.Errorf("batch span: %d links, want %d", got, maxBatchLinks)
	}
	if got := attrOf(bs[0], "delayq.links_dropped"); got != attribute.IntValue(n-maxBatchLinks) {
		t.Errorf("delayq.links_dropped = %v, want %d", got.String(), n-maxBatchLinks)
	}
}
