package daemon

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/tracing"
)

// Tracing of the requests that create or change tasks (package tracing).
//
// traced wraps their endpoints: the request's W3C trace context
// (traceparent, tracestate, baggage) becomes the parent of a server span
// named after the route ("POST /v1/tasks") when this process traces,
// and is passed on as it is when it does not. A task scheduled under a
// valid span context keeps that context in its headers (traceTask):
// the daemon's span when it traces, the caller's otherwise. A task whose
// body carries a trace context of its own that differs from the
// request's keeps its own (a client that groups several callers' tasks in
// one batch request sends each caller's context with its task). A request
// without a trace context costs one header lookup while tracing is off.

// tracedParent is the context key of the request's own traceparent.
type tracedParent struct{}

func traced(fn endpoint) endpoint {
	return func(c *call) (int, any, *wire.Error) {
		tp := c.Header.Get(tracing.HeaderTraceparent)
		if tp == "" && !tracing.On() {
			return fn(c)
		}
		ctx := c.Context()
		if tp != "" {
			ctx = context.WithValue(tracing.Propagator.Extract(ctx, propagation.HeaderCarrier(c.Header)), tracedParent{}, tp)
		}
		if !tracing.On() {
			c.Request = c.WithContext(ctx)
			return fn(c)
		}
		ctx, span := tracing.Tracer().Start(ctx, c.Pattern, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", c.Method), attribute.String("http.route", c.Pattern[len(c.Method)+1:])))
		defer span.End()
		if id := c.PathValue("id"); id != "" {
			span.SetAttributes(attribute.String("delayq.task.id", id))
		}
		c.Request = c.WithContext(ctx)
		status, body, e := fn(c)
		if e != nil {
			status = e.Status
			if status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, e.Message)
			}
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		return status, body, e
	}
}

// traceTask keeps ctx's trace context in t's headers (tracing.InjectTask)
// unless t carries its own, different from the request's; it does
// nothing when ctx has no valid span context.
func traceTask(ctx context.Context, t *task.Task) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if own := t.Headers[tracing.HeaderTraceparent]; own != "" {
		if req, _ := ctx.Value(tracedParent{}).(string); own != req {
			return
		}
	}
	t.Headers, _ = tracing.InjectTask(ctx, t.Headers, task.MaxHeaders)
}

// traceEmbedded starts the span of an embedded producer's call (package
// embedded) under the caller's span, on the global tracer provider (the
// embedding application's); ctx without a span context starts none.
func traceEmbedded(ctx context.Context, tasks int) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return tracing.Tracer().Start(ctx, "delayq.schedule", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.Int("delayq.tasks", tasks)))
}

// endTrace ends span (nil: none) with the outcome of a scheduled task.
func endTrace(span trace.Span, s *wire.Scheduled) {
	if span == nil {
		return
	}
	if s != nil {
		span.SetAttributes(attribute.String("delayq.task.id", s.ID), attribute.String("delayq.outcome", s.Outcome))
		if s.Err != nil {
			span.SetAttributes(attribute.Int("delayq.error.status", s.Err.Status))
			if s.Err.Status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, s.Err.Message)
			}
		}
	}
	span.End()
}
