package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/tracing"
)

// Tracing of a record's run (package tracing). A record that carries a
// trace context (a traceparent header: the task's, copied to its record
// when it fired) is run in that trace:
//
//   - when tracing is on (tracing.On), one span "delayq.attempt" (kind
//     consumer, child of the record's context) covers the record from its
//     parse to its end: its events say when it was claimed (claimed,
//     held), when its handler returned (handled) and when its outcome was
//     stored (finished); its attribute delayq.outcome says what became of
//     it (outOf), its status is Error for a failed attempt;
//   - when it is off, nothing is recorded, but the handler's context still
//     carries the record's context (a remote parent), so that a handler's
//     own spans, and the webhook's traceparent, continue the producer's
//     trace.
//
// A record without a traceparent costs a lookup in its (usually nil)
// map of task headers: no span, no allocation.

// Attribute keys of the attempt span (delayq's own).
const (
	attrTaskID      = attribute.Key("delayq.task.id")
	attrTaskType    = attribute.Key("delayq.task.type")
	attrShard       = attribute.Key("delayq.shard")
	attrGen         = attribute.Key("delayq.gen")
	attrAttempt     = attribute.Key("delayq.attempt")
	attrMaxAttempts = attribute.Key("delayq.max_attempts")
	attrLatenessMs  = attribute.Key("delayq.lateness_ms")
	attrOutcome     = attribute.Key("delayq.outcome")
	attrDurationMs  = attribute.Key("delayq.handler.duration_ms")
)

// Outcomes of the attempt span besides the handled_total labels.
const (
	outAbandoned = "abandoned"  // the worker stopped first: runs again elsewhere
	outNotStored = "not_stored" // fired again, cancelled or finished meanwhile
)

// traced reports whether a parsed record carries a trace context (cheap:
// a lookup in a map that is nil for most tasks).
func traced(rec *record.Fields) bool { return rec.Headers[record.HeaderTraceparent] != "" }

// traceStart sets it.tctx to the context a record runs in (ctx with the
// record's trace context as parent) and, when tracing is on, starts its
// attempt span (it.span) there. Call only for a traced record.
func traceStart(ctx context.Context, it *item) {
	tctx := tracing.ContextOfRecord(ctx, it.m)
	if !trace.SpanContextFromContext(tctx).IsValid() {
		return // a malformed traceparent: run as if it had none
	}
	if !tracing.On() {
		it.tctx = tctx
		return
	}
	m, rec := it.m, it.rec
	it.tctx, it.span = tracing.Tracer().Start(tctx, "delayq.attempt",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attrTaskID.String(rec.ID),
			attrTaskType.String(rec.Type),
			attrShard.Int(rec.Shard),
			attrGen.Int64(int64(rec.Gen)), //nolint:gosec // a generation stays far below 2^63
			attrAttempt.Int(rec.Attempt),
			semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeDeliver, // "process"
			semconv.MessagingDestinationName(m.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(m.Partition)),
			attribute.Int64("messaging.kafka.offset", m.Offset), // as the event process' delayq.fire spans
		))
}

// traceClaimed notes that an item's execution is claimed (its task read);
// span is it.span, not nil.
func traceClaimed(it *item) {
	it.span.AddEvent("claimed", trace.WithAttributes(
		attrAttempt.Int(it.t.Attempt), attrMaxAttempts.Int(it.t.Attempts())))
	it.span.SetAttributes(attrAttempt.Int(it.t.Attempt), attrMaxAttempts.Int(it.t.Attempts()))
}

// traceRunning notes that an item's handler starts at started; due is its
// task's due time.
func traceRunning(it *item, started, due time.Time) {
	it.span.SetAttributes(attrLatenessMs.Int64(started.Sub(due).Milliseconds()))
}

// traceHandled notes that an item's handler returned after ran, with herr.
func traceHandled(it *item, ran time.Duration, herr error) {
	it.span.AddEvent("handled", trace.WithAttributes(attrDurationMs.Float64(float64(ran.Microseconds())/1000)))
	if herr != nil {
		it.span.SetStatus(codes.Error, herr.Error())
	}
}

// traceEnd ends an item's attempt span (it ends): delayq.outcome says
// what became of it.
func traceEnd(it *item) {
	s := it.span
	it.span = nil
	out := it.traceOut
	switch it.state {
	case stateParked:
		out = outParked
	case stateDeferred:
		out = outDeferred
	case stateStored:
		if out == "" {
			out = it.out.label
		}
	case stateAbandoned:
		out = outAbandoned
	}
	if out != "" {
		s.SetAttributes(attrOutcome.String(out))
	}
	s.End()
}

// exemplar is the exemplar of an observation made while an item ran:
// its trace id when its attempt span is sampled, else nil.
func exemplar(tctx context.Context) prometheus.Labels {
	if tctx == nil {
		return nil
	}
	s := trace.SpanFromContext(tctx)
	if !s.IsRecording() || !s.SpanContext().IsSampled() {
		return nil
	}
	return prometheus.Labels{"trace_id": s.SpanContext().TraceID().String()}
}

// observe observes v with o, with ex as its exemplar when not nil (and o
// takes exemplars).
func observe(o prometheus.Observer, v float64, ex prometheus.Labels) {
	if ex != nil {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, ex)
			return
		}
	}
	o.Observe(v)
}
