package tracing

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/testenv"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func remote(t *testing.T) context.Context {
	t.Helper()
	return ContextOfTask(context.Background(), map[string]string{HeaderTraceparent: tp, HeaderTracestate: "a=1"})
}

func TestInjectTask(t *testing.T) {
	ctx := remote(t)
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() {
		t.Fatalf("ContextOfTask: %v", sc)
	}
	h, ok := InjectTask(ctx, map[string]string{"own": "x", HeaderTracestate: "old=1"}, 64)
	if !ok || h[HeaderTraceparent] != tp || h[HeaderTracestate] != "a=1" || h["own"] != "x" {
		t.Fatalf("InjectTask: %v %v", ok, h)
	}
	// nothing without a span context; nothing over the header limit
	if h, ok := InjectTask(context.Background(), nil, 64); ok || h != nil {
		t.Fatalf("without a span context: %v %v", ok, h)
	}
	full := map[string]string{}
	for i := range 63 {
		full[string(rune('a'+i%26))+strings.Repeat("x", i)] = "v"
	}
	if _, ok := InjectTask(ctx, full, 64); ok {
		t.Fatal("wrote past the header limit")
	}
	if got := ContextOfTask(context.Background(), map[string]string{"x": "y"}); trace.SpanContextFromContext(got).IsValid() {
		t.Fatal("a context from headers without traceparent")
	}
}

func TestRecordParent(t *testing.T) {
	m := kafka.Message{Headers: []kafka.Header{{Key: "dq-id", Value: []byte("a")}, {Key: HeaderTraceparent, Value: []byte(tp)}}}
	if sc := trace.SpanContextFromContext(ContextOfRecord(context.Background(), &m)); sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("ContextOfRecord: %v", sc)
	}
	sid, _ := trace.SpanIDFromHex("1111111111111111")
	sc := trace.SpanContextFromContext(remote(t)).WithSpanID(sid)
	SetRecordParent(&m, trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), sc)))
	var n int
	for _, h := range m.Headers {
		if h.Key == HeaderTraceparent {
			n++
			if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"; string(h.Value) != want {
				t.Errorf("traceparent %s, want %s", h.Value, want)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d traceparent headers", n)
	}
}

// Off by default; OTEL_TRACES_EXPORTER names what it does not support;
// with an OTLP endpoint the spans reach a real OTLP/HTTP receiver.
func TestSetupFromEnv(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
	end, err := Setup(t.Context(), Options{Service: "t"}, log)
	if err != nil || On() {
		t.Fatalf("default: on %v, err %v", On(), err)
	}
	_ = end(t.Context())
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := Setup(t.Context(), Options{Service: "t"}, log); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("an unsupported exporter: %v", err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	rx := testenv.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.Endpoint)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	end, err = Setup(t.Context(), Options{Service: "t", BatchTimeout: 50 * time.Millisecond}, log)
	if err != nil || !On() {
		t.Fatalf("with an endpoint: on %v, err %v", On(), err)
	}
	_, span := Tracer().Start(remote(t), "x")
	span.End()
	if err := end(t.Context()); err != nil {
		t.Fatal(err)
	}
	if On() {
		t.Fatal("still on after the shutdown")
	}
	s := rx.Trace("4bf92f3577b34da6a3ce929d0e0e4736")
	if len(s) != 1 || s[0].Name != "x" || s[0].ParentID != "00f067aa0ba902b7" || s[0].Service != "from-env" {
		t.Fatalf("received %+v", s)
	}
}

func TestPrinter(t *testing.T) {
	var b bytes.Buffer
	end, err := Setup(t.Context(), Options{Service: "dev", Exporter: NewPrinter(&b)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := Tracer().Start(remote(t), "parent")
	_, child := Tracer().Start(ctx, "child")
	child.End()
	parent.End()
	_ = end(t.Context())
	out := b.String()
	if !strings.Contains(out, "trace 4bf92f3577b34da6a3ce929d0e0e4736 parent [dev]") || !strings.Contains(out, "  child [dev]") {
		t.Fatalf("printed:\n%s", out)
	}
}

// A child ends before its parent, so the batcher can export it a batch
// earlier: the printer holds a child of a local parent until the parent
// is printed, and prints a child of a remote parent at once (the flaky
// dq dev --trace test: the webhook span printed unindented).
func TestPrinterHoldsChildUntilLocalParent(t *testing.T) {
	tid := trace.TraceID{1}
	sc := func(id byte, remote bool) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{id}, TraceFlags: trace.FlagsSampled, Remote: remote})
	}
	at := time.Now()
	stub := func(name string, id byte, parent trace.SpanContext, start time.Duration) sdktrace.ReadOnlySpan {
		return tracetest.SpanStub{Name: name, SpanContext: sc(id, false), Parent: parent,
			StartTime: at.Add(start), EndTime: at.Add(time.Second)}.Snapshot()
	}
	var b bytes.Buffer
	p := NewPrinter(&b)
	attempt := stub("attempt", 2, sc(1, true), 0) // its parent, the fire, is another process'
	webhook := stub("webhook", 3, sc(2, false), time.Millisecond)
	if err := p.ExportSpans(t.Context(), []sdktrace.ReadOnlySpan{webhook}); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Fatalf("a child printed before its local parent:\n%s", b.String())
	}
	if err := p.ExportSpans(t.Context(), []sdktrace.ReadOnlySpan{attempt}); err != nil {
		t.Fatal(err)
	}
	want := "trace " + tid.String() + " attempt [] "
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasPrefix(lines[1], "trace "+tid.String()+"   webhook [] ") {
		t.Fatalf("printed:\n%s\nwant the attempt (its remote parent not waited for), then the webhook under it", b.String())
	}
	// a child whose local parent never comes is printed at Shutdown
	b.Reset()
	if err := p.ExportSpans(t.Context(), []sdktrace.ReadOnlySpan{stub("orphan", 5, sc(4, false), 0)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "trace "+tid.String()+" orphan [] ") {
		t.Fatalf("printed at shutdown:\n%s", b.String())
	}
}
