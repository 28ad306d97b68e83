package engine

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/tracing"
)

// A handler's context started with a trace context has its values (its
// span) and still ends as its runner's handler contexts do; one started
// without has its parent's.
func TestHandlerCtxCarriesTheTraceContext(t *testing.T) {
	type key struct{}
	parent := context.WithValue(t.Context(), key{}, "v")
	ht := newHandlerTimer(parent)
	defer ht.stop()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	tctx := trace.ContextWithRemoteSpanContext(parent, sc)

	c := ht.startWith(time.Now(), time.Minute, tctx)
	if got := trace.SpanContextFromContext(c); !got.Equal(sc) {
		t.Errorf("span context %v, want %v", got, sc)
	}
	if c.Value(key{}) != "v" {
		t.Error("the parent's value is lost")
	}
	child, cancel := context.WithCancel(c)
	defer cancel()
	ht.finish(c)
	<-child.Done() // follows c through AfterFunc

	c = ht.startAt(time.Now(), time.Minute)
	if trace.SpanContextFromContext(c).IsValid() {
		t.Error("a span context in a context started without one")
	}
	ht.finish(c)
}

// With tracing off, a record without a traceparent costs no allocation
// for tracing: the lookup of its headers, and no exemplar.
func TestTraceOffRecordWithoutTraceparentAllocatesNothing(t *testing.T) {
	if tracing.On() {
		t.Fatal("tracing is on")
	}
	tk := &task.Task{ID: "a", Type: "t", Gen: 1, Attempt: 1, DueAt: time.Now(), Payload: []byte("{}")}
	m := record.Encode(tk, "dq.tasks", time.Now())
	rec, err := record.Parse(&m, 0)
	if err != nil {
		t.Fatal(err)
	}
	var it item
	it.m, it.rec = &m, rec
	n := testing.AllocsPerRun(100, func() {
		if traced(rec) {
			traceStart(t.Context(), &it)
		}
		if it.tctx != nil && exemplar(it.tctx) != nil {
			t.Fatal("exemplar")
		}
	})
	if n != 0 || it.tctx != nil {
		t.Errorf("%v allocations, tctx %v", n, it.tctx)
	}

	// one that carries a traceparent runs in the record's context
	tk.Headers = map[string]string{record.HeaderTraceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	m = record.Encode(tk, "dq.tasks", time.Now())
	if rec, err = record.Parse(&m, 0); err != nil {
		t.Fatal(err)
	}
	it = item{m: &m, rec: rec}
	if !traced(rec) {
		t.Fatal("not traced")
	}
	traceStart(t.Context(), &it)
	if sc := trace.SpanContextFromContext(it.tctx); sc.SpanID().String() != "b7ad6b7169203331" || it.span != nil {
		t.Errorf("span context %v, span %v", sc, it.span)
	}

	// a malformed one is no trace context
	m.Headers = []kafka.Header{{Key: record.HeaderTraceparent, Value: []byte("junk")}}
	it = item{m: &m, rec: &record.Fields{Headers: map[string]string{record.HeaderTraceparent: "junk"}}}
	traceStart(t.Context(), &it)
	if it.tctx != nil {
		t.Error("a context for a malformed traceparent")
	}
}
