package client

import (
	"context"
	"maps"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing: the caller's OpenTelemetry span context (ctx) travels with
// every request as W3C Trace Context and Baggage headers, and with every
// scheduled task as the task's own traceparent, tracestate and baggage
// headers, so that the task's fired Kafka record, its worker attempt and
// its webhook continue the caller's trace (the daemon makes its own span
// the task's parent when it traces). Concurrent Schedule calls grouped
// in one batch request each keep their own caller's context. Nothing is
// sent when ctx carries no span context; a task that already has a
// traceparent header keeps it.

var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// maxTaskHeaders is the daemon's limit on a task's headers.
const maxTaskHeaders = 64

// traceRequest writes ctx's trace context into a request's headers.
func traceRequest(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// tracedTask is t with ctx's trace context among its headers (a copy of
// them: the caller's map is left alone).
func tracedTask(ctx context.Context, t *Task) *Task {
	if !trace.SpanContextFromContext(ctx).IsValid() || t.Headers["traceparent"] != "" {
		return t
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	if len(c["baggage"]) > 1024 {
		delete(c, "baggage")
	}
	if len(t.Headers)+len(c) > maxTaskHeaders {
		return t
	}
	cp := *t
	cp.Headers = maps.Clone(t.Headers)
	if cp.Headers == nil {
		cp.Headers = make(map[string]string, len(c))
	}
	maps.Copy(cp.Headers, c)
	return &cp
}
