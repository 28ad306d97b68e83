// Package tracing owns delayq's OpenTelemetry tracing: the process'
// tracer provider, set up from the standard OTEL_* environment variables
// (Setup; off by default), the tracer every process starts its spans
// with (Tracer), and the trace context a task carries from the request
// that created it to the record Kafka holds and the handler that runs it.
//
// The trace context of a task is W3C Trace Context (traceparent,
// tracestate) and W3C Baggage, kept as the task's own headers under
// those names (InjectTask, ContextOfTask): stored with the task in Redis,
// copied to the fired Kafka record's headers by package record like any
// task header, so that any Kafka consumer, not only delayq's worker, can
// continue the trace from the record alone (ContextOfRecord). Nothing is
// stored when the request carries no trace context.
//
// A trace of one task, when every process exports:
//
//	client request ─ delayq.schedule (daemon, server)
//	                   └─ [the task waits in Redis]
//	                   └─ delayq.fire (event, producer; its traceparent is the record's)
//	                        └─ delayq.attempt (work, consumer; one per attempt)
//	                             └─ delayq.webhook (work, client; traceparent sent)
//
// A process that does not export passes the context on unchanged: the
// record then continues the daemon's span (or the caller's).
//
// When tracing is off (On reports false) the hot paths do nothing more
// than look for a traceparent header: the tracer is OpenTelemetry's no-op.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/record"
)

// The header names of the trace context, on a task and on its Kafka
// records (pinned: the W3C names, lower case; package record owns them).
const (
	HeaderTraceparent = record.HeaderTraceparent
	HeaderTracestate  = record.HeaderTracestate
	HeaderBaggage     = record.HeaderBaggage
)

// MaxBaggage bounds the baggage stored with a task: a larger one is not
// stored (the trace context is).
const MaxBaggage = 1024

// ScopeName is the instrumentation scope of delayq's spans.
const ScopeName = "github.com/delayq/delayq"

// Propagator reads and writes the trace context: W3C Trace Context and
// Baggage, whatever the process' global propagator.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

var on atomic.Bool

// On reports whether this process records spans (Setup installed a
// provider). Hot paths skip the work that only a recorded span needs.
func On() bool { return on.Load() }

// Tracer is delayq's tracer on the global provider (OpenTelemetry's no-op
// until Setup, or an embedding application, installs one).
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// Options configure Setup.
type Options struct {
	Service string // service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES sets it
	Version string // service.version
	// Exporter, when set, receives the spans whatever the environment
	// says (dq dev --trace prints them with Printer).
	Exporter sdktrace.SpanExporter
	// BatchTimeout, when set, is the longest a span waits to be exported
	// (default: OTEL_BSP_SCHEDULE_DELAY or 5 s).
	BatchTimeout time.Duration
}

// Setup installs the process' tracer provider as the environment
// configures it, and returns the function that flushes and stops it
// (a no-op when tracing stays off). Tracing is on when
// OTEL_TRACES_EXPORTER names "otlp" or "console", or, with it unset, when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
// set; OTEL_SDK_DISABLED=true turns it off. The OTLP protocol is
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
// "http/protobuf" (the default) or "grpc". The exporter reads its
// endpoint, headers, TLS and timeout from the OTEL_EXPORTER_OTLP_*
// variables, the SDK its sampler (OTEL_TRACES_SAMPLER, default
// parentbased_always_on) and batching (OTEL_BSP_*), the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Errors name the variable
// at fault.
func Setup(ctx context.Context, o Options, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	exp := o.Exporter
	if exp == nil {
		if exp, err = exporterFromEnv(ctx); err != nil || exp == nil {
			return none, err
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(o.Service), semconv.ServiceVersion(o.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && res == nil {
		return none, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	var bo []sdktrace.BatchSpanProcessorOption
	if o.BatchTimeout > 0 {
		bo = append(bo, sdktrace.WithBatchTimeout(o.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, bo...), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "error", err)
	}))
	on.Store(true)
	svc, _ := res.Set().Value(semconv.ServiceNameKey)
	log.Info("tracing on", "service", svc.AsString())
	return func(ctx context.Context) error {
		on.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// exporterFromEnv is the exporter the OTEL_* variables ask for; nil when
// tracing stays off.
func exporterFromEnv(ctx context.Context) (sdktrace.SpanExporter, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	kind := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")))
	if kind == "" && (os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		kind = "otlp"
	}
	switch kind {
	case "", "none":
		return nil, nil
	case "console":
		return NewPrinter(os.Stderr), nil
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported (otlp, console or none)", kind)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(proto) {
	case "", "http/protobuf":
		e, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
		}
		return e, nil
	case "grpc":
		e, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
		}
		return e, nil
	}
	return nil, errors.New("OTEL_EXPORTER_OTLP_PROTOCOL: " + proto + " is not supported (http/protobuf or grpc)")
}

// InjectTask writes ctx's trace context into a task's headers, which it
// returns (made when nil), and reports whether it wrote. It writes
// nothing when ctx has no valid span context, nor when the headers would
// exceed limit (the task's header limit); a baggage over MaxBaggage bytes
// is left out.
func InjectTask(ctx context.Context, headers map[string]string, limit int) (map[string]string, bool) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers, false
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	if len(c[HeaderBaggage]) > MaxBaggage {
		delete(c, HeaderBaggage)
	}
	n := len(headers)
	for k := range c {
		if _, ok := headers[k]; !ok {
			n++
		}
	}
	if n > limit {
		return headers, false
	}
	if headers == nil {
		headers = make(map[string]string, len(c))
	}
	delete(headers, HeaderTracestate) // a tracestate of an earlier context is not this one's
	for k, v := range c {
		headers[k] = v
	}
	return headers, true
}

// ContextOfTask is ctx with the trace context of a task's headers as its
// remote parent (ctx unchanged when they carry none).
func ContextOfTask(ctx context.Context, headers map[string]string) context.Context {
	if headers[HeaderTraceparent] == "" {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier(headers))
}
