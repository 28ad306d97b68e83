package work

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/internal/tracing/tracingtest"
)

// spanNamed is the span of a name whose attribute key is value, if ended.
func spanNamed(spans tracetest.SpanStubs, name, key, value string) (tracetest.SpanStub, bool) {
	for _, s := range spans {
		if s.Name == name && (key == "" || tracingtest.Attr(s, key).AsString() == value) {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

const (
	testTraceID  = "0af7651916cd43dd8448eb211c80319c"
	testParentID = "b7ad6b7169203331"
	testTP       = "00-" + testTraceID + "-" + testParentID + "-01"
	testTS       = "vendor=x"
)

// traceSink is a webhook receiver that keeps the trace headers of every
// request by Dq-Id (or Dq-Hook for hooks).
type traceSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]http.Header
}

func newTraceSink(t *testing.T) *traceSink {
	s := &traceSink{got: map[string]http.Header{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got[r.Header.Get("Dq-Id")] = r.Header.Clone()
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *traceSink) header(id string) (http.Header, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.got[id]
	return h, ok
}

func tracedJSONTask(id string) *task.Task {
	tk := jsonTask(id, "order.cancel")
	tk.Headers = map[string]string{"traceparent": testTP, "tracestate": testTS}
	return tk
}

// With tracing on, the webhook request of a record that carries a
// traceparent is made in a delayq.webhook span (client), child of the
// attempt span, itself the child of the record's context; the request
// carries the webhook span's traceparent (and the record's tracestate).
func TestTraceWebhookSpan(t *testing.T) {
	spans := tracingtest.On(t)
	e := newEnv(t)
	s := newTraceSink(t)
	startApp(t, e.vars(s.srv.URL+"/hook?token=secret"))
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, tracedJSONTask("t1"), jsonTask("plain", "order.cancel"))
	e.WaitState(t, 15*time.Second, task.StateSucceeded, "t1", "plain")

	var att, wh tracetest.SpanStub
	testenv.WaitFor(t, 10*time.Second, "attempt and webhook spans ended", func() bool {
		ss := spans()
		var ok1, ok2 bool
		att, ok1 = spanNamed(ss, "delayq.attempt", "delayq.task.id", "t1")
		wh, ok2 = spanNamed(ss, "delayq.webhook", "", "")
		return ok1 && ok2
	})
	if att.Parent.TraceID().String() != testTraceID || att.Parent.SpanID().String() != testParentID {
		t.Errorf("attempt's parent %s/%s, want the record's", att.Parent.TraceID(), att.Parent.SpanID())
	}
	if wh.Parent.SpanID() != att.SpanContext.SpanID() || wh.SpanContext.TraceID() != att.SpanContext.TraceID() {
		t.Errorf("webhook's parent %s, want the attempt %s", wh.Parent.SpanID(), att.SpanContext.SpanID())
	}
	if wh.SpanKind != trace.SpanKindClient {
		t.Errorf("webhook span kind %v", wh.SpanKind)
	}
	if got := tracingtest.Attr(wh, "http.request.method").AsString(); got != http.MethodPost {
		t.Errorf("http.request.method %q", got)
	}
	if got := tracingtest.Attr(wh, "http.response.status_code").AsInt64(); got != 200 {
		t.Errorf("http.response.status_code %d", got)
	}
	if got, want := tracingtest.Attr(wh, "url.full").AsString(), config.RedactURL(s.srv.URL+"/hook?token=secret"); got != want || strings.Contains(got, "secret") {
		t.Errorf("url.full %q, want %q (redacted)", got, want)
	}
	if got := tracingtest.Attr(att, "delayq.outcome").AsString(); got != "succeeded" {
		t.Errorf("attempt outcome %q", got)
	}
	h, _ := s.header("t1")
	if got, want := h.Get("traceparent"), "00-"+testTraceID+"-"+wh.SpanContext.SpanID().String()+"-01"; got != want {
		t.Errorf("request traceparent %q, want %q (the webhook span's)", got, want)
	}
	if got := h.Get("tracestate"); got != testTS {
		t.Errorf("request tracestate %q, want %q", got, testTS)
	}
	if h, _ := s.header("plain"); h.Get("traceparent") != "" {
		t.Errorf("a task without a trace context sent traceparent %q", h.Get("traceparent"))
	}
	if _, made := spanNamed(spans(), "delayq.attempt", "delayq.task.id", "plain"); made {
		t.Error("an attempt span for a record without a traceparent")
	}
}

// With tracing off, the webhook request of a record that carries a
// traceparent carries the record's own (the receiver continues the
// producer's trace), and its tracestate.
func TestTraceOffWebhookPassesTheRecordsContext(t *testing.T) {
	if tracing.On() {
		t.Fatal("tracing is on")
	}
	e := newEnv(t)
	s := newTraceSink(t)
	startApp(t, e.vars(s.srv.URL))
	e.Firer.Start(t)
	worktest.Schedule(t, e.Store, tracedJSONTask("t1"))
	e.WaitState(t, 15*time.Second, task.StateSucceeded, "t1")
	h, _ := s.header("t1")
	if got := h.Get("traceparent"); got != testTP {
		t.Errorf("request traceparent %q, want the record's %q", got, testTP)
	}
	if got := h.Get("tracestate"); got != testTS {
		t.Errorf("request tracestate %q, want %q", got, testTS)
	}
}

// An outcome hook continues the trace of the outcome's task: with
// tracing on in a delayq.hook span (client), child of the record's
// context, whose traceparent the request carries; with it off, the
// request carries the record's traceparent.
func TestTraceHooks(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[on], func(t *testing.T) {
			var spans func() tracetest.SpanStubs
			if on {
				spans = tracingtest.On(t)
			}
			e := newHookEnv(t)
			s := newHookSink(t)
			h := e.newTestHooks(t, map[string]OutcomeHooks{
				"*": {OnSuccess: s.srv.URL + "/ok", Timeout: 5 * time.Second, MaxAge: time.Hour},
			}, prometheus.NewRegistry())
			runHooks(t, h)
			o := newOutcome("t1", "order.charge", record.OutcomeSucceeded)
			o.Headers["traceparent"] = testTP
			e.publish(t, o)
			e.waitCommitted(t, 1)
			calls := s.all()
			if len(calls) != 1 {
				t.Fatalf("%d calls", len(calls))
			}
			got := calls[0].header.Get("traceparent")
			if !on {
				if got != testTP {
					t.Errorf("request traceparent %q, want the record's %q", got, testTP)
				}
				return
			}
			var hs tracetest.SpanStub
			testenv.WaitFor(t, 10*time.Second, "hook span ended", func() bool {
				var ok bool
				hs, ok = spanNamed(spans(), "delayq.hook", "", "")
				return ok
			})
			if hs.Parent.TraceID().String() != testTraceID || hs.Parent.SpanID().String() != testParentID || hs.SpanKind != trace.SpanKindClient {
				t.Errorf("hook span: parent %s/%s kind %v", hs.Parent.TraceID(), hs.Parent.SpanID(), hs.SpanKind)
			}
			if want := "00-" + testTraceID + "-" + hs.SpanContext.SpanID().String() + "-01"; got != want {
				t.Errorf("request traceparent %q, want %q (the hook span's)", got, want)
			}
			if tracingtest.Attr(hs, "http.response.status_code").AsInt64() != 200 || tracingtest.Attr(hs, "delayq.hook").AsString() != hookOnSuccess {
				t.Errorf("hook span attributes %v", hs.Attributes)
			}
		})
	}
}
