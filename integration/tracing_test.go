package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// traceHook is a webhook that answers 200 and keeps each delivery's
// traceparent by task id.
type traceHook struct {
	mu  sync.Mutex
	got map[string]string
}

func (h *traceHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got[r.Header.Get("Dq-Id")] = r.Header.Get("traceparent")
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (h *traceHook) wait(t *testing.T, ids []string) map[string]string {
	t.Helper()
	waitFor(t, 30*time.Second, "webhook deliveries", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, id := range ids {
			if _, ok := h.got[id]; !ok {
				return false, "no delivery of " + id
			}
		}
		return true, ""
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(h.got))
	for k, v := range h.got {
		out[k] = v
	}
	return out
}

// parentOf reads a traceparent: its trace id and span id.
func parentOf(tp string) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": tp}))
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// callerContext is a producer's context inside a sampled span of its own
// trace (as a web request's handler would be).
func callerContext(traceID, spanID string) context.Context {
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(spanID)
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
}

// TestTracing follows tasks scheduled by a Go client inside a caller's
// span through the real binaries, each exporting OTLP/HTTP to an
// in-test receiver (the official protocol packages decode it): the
// daemon's server span, the event's fire span, the worker's attempt span
// and its webhook span form one trace under the caller's span, each the
// parent of the next; the Kafka record's traceparent continues the fire
// span (a franz-go consumer continues the trace from the record alone)
// and the webhook request's continues the webhook span. With every
// binary's tracing off the caller's context still reaches the record and
// the webhook unchanged, and a task scheduled without one carries none.
func TestTracing(t *testing.T) {
	t.Run("exported", func(t *testing.T) {
		rx := testenv.StartOTLP(t)
		hook := &traceHook{got: map[string]string{}}
		c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: hook, Env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": rx.Endpoint,
			"OTEL_BSP_SCHEDULE_DELAY":     "200",
		}})
		kl := watchKafka(t, c, "dq.tasks")
		api := newAPI(c, 0)

		const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		ctx := callerContext(callerTrace, callerSpan)
		var ids []string
		for i := range 3 {
			id := fmt.Sprintf("traced-%d", i)
			ids = append(ids, id)
			if _, err := api.Schedule(ctx, client.Task{ID: id, Type: "it.trace", Payload: []byte(`{}`), Delay: time.Second}); err != nil {
				t.Fatalf("schedule %s: %v", id, err)
			}
		}
		got := hook.wait(t, ids)
		kl.waitRecords(t, ids, 10*time.Second)

		var spans []testenv.OTLPSpan
		byID := map[string]testenv.OTLPSpan{}
		waitFor(t, 20*time.Second, "the spans of every traced task", func() (bool, string) {
			spans = rx.Trace(callerTrace)
			n := map[string]int{}
			for _, s := range spans {
				n[s.Name]++
				byID[s.SpanID] = s
			}
			ok := n["POST /v1/tasks"] >= 3 && n["delayq.fire"] >= 3 && n["delayq.attempt"] >= 3 && n["delayq.webhook"] >= 3
			return ok, fmt.Sprintf("spans of trace %s so far:\n%s", callerTrace, testenv.Describe(spans))
		})
		for _, id := range ids {
			// webhook request → webhook span → attempt → fire → daemon → caller
			tid, sid := parentOf(got[id])
			if tid != callerTrace {
				t.Errorf("%s: webhook request traceparent %q: want trace %s", id, got[id], callerTrace)
				continue
			}
			chain := []struct {
				name, service string
				kind          tracepb.Span_SpanKind
			}{
				{"delayq.webhook", "delayq-work", tracepb.Span_SPAN_KIND_CLIENT},
				{"delayq.attempt", "delayq-work", tracepb.Span_SPAN_KIND_CONSUMER},
				{"delayq.fire", "delayq-event", tracepb.Span_SPAN_KIND_PRODUCER},
				{"POST /v1/tasks", "delayq-daemon", tracepb.Span_SPAN_KIND_SERVER},
			}
			cur := sid
			var fire string
			for _, want := range chain {
				s, ok := byID[cur]
				if !ok || s.Name != want.name || s.Service != want.service || s.Kind != want.kind {
					t.Errorf("%s: span %s is %+v; want %s (%s, %v) in the chain\n%s", id, cur, s, want.name, want.service, want.kind, testenv.Describe(spans))
					break
				}
				if want.name == "delayq.fire" {
					fire = s.SpanID
					if s.Attrs["delayq.task.id"] != id {
						t.Errorf("%s: its fire span names task %q", id, s.Attrs["delayq.task.id"])
					}
				}
				if want.name == "delayq.attempt" && (s.Attrs["delayq.task.id"] != id || s.Attrs["delayq.attempt"] != "1") {
					t.Errorf("%s: attempt span attributes %v", id, s.Attrs)
				}
				cur = s.ParentID
			}
			if cur != callerSpan {
				t.Errorf("%s: the daemon's span has parent %s, want the caller's span %s", id, cur, callerSpan)
			}
			// the record alone continues the trace (a franz-go consumer)
			recs := kl.records(id)
			if len(recs) == 0 {
				t.Errorf("%s: no record", id)
				continue
			}
			carrier := propagation.MapCarrier{}
			for _, h := range recs[0].Headers {
				carrier[h.Key] = string(h.Value)
			}
			sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
			if !sc.IsValid() || sc.TraceID().String() != callerTrace || sc.SpanID().String() != fire || !sc.IsSampled() {
				t.Errorf("%s: the record's trace context %v (traceparent %q) does not continue the fire span %s of trace %s",
					id, sc, carrier["traceparent"], fire, callerTrace)
			}
		}
		// the worker's lag histogram names a traced attempt's trace as
		// its exemplar, in the OpenMetrics format a Prometheus asks for
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, c.AdminURL(Work, 0)+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		om, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(om), `# {trace_id="`+callerTrace+`"}`) {
			t.Errorf("the work process' /metrics (OpenMetrics) has no exemplar of trace %s", callerTrace)
		}
		// a task without a caller's span: the daemon's own span starts a
		// trace. It is scheduled only now: its attempt's observations
		// carry that trace as their exemplar, and a histogram keeps the
		// last exemplar of each bucket, so, run among the traced tasks, it
		// could take the place of their exemplar above
		if _, err := api.Schedule(t.Context(), client.Task{ID: "untraced", Type: "it.trace", Payload: []byte(`{}`), Delay: time.Second}); err != nil {
			t.Fatal(err)
		}
		got = hook.wait(t, []string{"untraced"})
		if tid, _ := parentOf(got["untraced"]); tid == "" || tid == callerTrace {
			t.Errorf("the task scheduled without a caller's span: webhook traceparent %q, want a trace of the daemon's own", got["untraced"])
		} else {
			var names []string
			waitFor(t, 10*time.Second, "the untraced task's trace", func() (bool, string) {
				names = names[:0]
				for _, s := range rx.Trace(tid) {
					names = append(names, s.Name)
				}
				return len(names) >= 4, strings.Join(names, ", ")
			})
		}
	})

	t.Run("off", func(t *testing.T) {
		hook := &traceHook{got: map[string]string{}}
		c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: hook})
		kl := watchKafka(t, c, "dq.tasks")
		api := newAPI(c, 0)
		const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		want := "00-" + callerTrace + "-" + callerSpan + "-01"
		if _, err := api.Schedule(callerContext(callerTrace, callerSpan), client.Task{ID: "passed", Type: "it.trace", Payload: []byte(`{}`), Delay: time.Second}); err != nil {
			t.Fatal(err)
		}
		if _, err := api.Schedule(t.Context(), client.Task{ID: "plain", Type: "it.trace", Payload: []byte(`{}`), Delay: time.Second}); err != nil {
			t.Fatal(err)
		}
		got := hook.wait(t, []string{"passed", "plain"})
		kl.waitRecords(t, []string{"passed", "plain"}, 10*time.Second)
		if got["passed"] != want {
			t.Errorf("tracing off: webhook traceparent %q, want the caller's %q", got["passed"], want)
		}
		if got["plain"] != "" {
			t.Errorf("a task scheduled without a trace context: webhook traceparent %q", got["plain"])
		}
		for id, w := range map[string]string{"passed": want, "plain": ""} {
			var tp string
			for _, h := range kl.records(id)[0].Headers {
				if h.Key == "traceparent" {
					tp = string(h.Value)
				}
			}
			if tp != w {
				t.Errorf("tracing off: record of %s has traceparent %q, want %q", id, tp, w)
			}
		}
	})
}
