// Package tracingtest turns a process' tracing on for one test, with an
// in-memory exporter, for the tests of the packages that make spans.
package tracingtest

import (
	"context"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/delayq/delayq/internal/tracing"
)

// On turns tracing on (tracing.Setup with an in-memory exporter) until
// the end of the test, restoring the global provider and propagator then,
// and returns a function that returns the spans ended so far. Tracing is
// process-wide: a test that calls it must not run in parallel with one
// that makes spans.
func On(t testing.TB) (spans func() tracetest.SpanStubs) {
	t.Helper()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	exp := tracetest.NewInMemoryExporter()
	shutdown, err := tracing.Setup(t.Context(), tracing.Options{Service: "t", Exporter: exp}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tp := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	t.Cleanup(func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	return func() tracetest.SpanStubs {
		if err := tp.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		return exp.GetSpans()
	}
}

// Attr is the value of a span's attribute key (the empty value when
// absent).
func Attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}
