package embedded_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/internal/tracing/tracingtest"
)

// callerSpan is a context inside a sampled span of a caller's trace.
func callerSpan(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(t.Context(), sc), sc
}

// The embedded producer keeps its caller's trace context with the task
// (docs/tracing.md): as it is when nothing in the process traces, under
// a delayq.schedule span when the process does; and stores none for a
// caller without one.
func TestScheduleKeepsTheCallersTrace(t *testing.T) {
	r := testenv.StartRedis(t)
	p := open(t, r, t.TempDir())
	ctx, caller := callerSpan(t)

	traceparent := func(id string) string {
		t.Helper()
		info, err := p.Client().Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return info.Headers[tracing.HeaderTraceparent]
	}
	if _, err := p.Schedule(ctx, task("off-1")); err != nil {
		t.Fatal(err)
	}
	if got, want := traceparent("off-1"), "00-"+caller.TraceID().String()+"-"+caller.SpanID().String()+"-01"; got != want {
		t.Fatalf("tracing off: the task's traceparent %q, want the caller's %q", got, want)
	}
	if _, err := p.Schedule(t.Context(), task("none-1")); err != nil {
		t.Fatal(err)
	}
	if got := traceparent("none-1"); got != "" {
		t.Fatalf("a caller without a trace context: the task's traceparent %q", got)
	}

	spans := tracingtest.On(t)
	if _, err := p.Schedule(ctx, task("on-1")); err != nil {
		t.Fatal(err)
	}
	var span *trace.SpanContext
	for _, s := range spans() {
		if s.Name == "delayq.schedule" && tracingtest.Attr(s, "delayq.task.id").AsString() == "on-1" {
			if s.Parent.SpanID() != caller.SpanID() || s.SpanKind != trace.SpanKindProducer {
				t.Fatalf("delayq.schedule: parent %s kind %v, want the caller's span %s, producer", s.Parent.SpanID(), s.SpanKind, caller.SpanID())
			}
			sc := s.SpanContext
			span = &sc
		}
	}
	if span == nil {
		t.Fatal("no delayq.schedule span for on-1")
	}
	if got, want := traceparent("on-1"), "00-"+caller.TraceID().String()+"-"+span.SpanID().String()+"-01"; got != want {
		t.Fatalf("tracing on: the task's traceparent %q, want the delayq.schedule span's %q", got, want)
	}
}
