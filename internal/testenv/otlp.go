package testenv

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OTLP/HTTP trace receiver (POST /v1/traces,
// protobuf, gzip or not) that decodes what the OpenTelemetry exporters
// send with the official protocol packages and keeps every span: a
// collector for tests, on a free loopback port, stopped at cleanup.
type OTLPReceiver struct {
	// Endpoint is the base URL, for OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string

	mu    sync.Mutex
	spans []OTLPSpan
}

// OTLPSpan is one received span, its ids in lower-case hex.
type OTLPSpan struct {
	Service                   string // the resource's service.name
	TraceID, SpanID, ParentID string
	Name                      string
	Kind                      tracepb.Span_SpanKind
	Start, End                time.Time
	Attrs                     map[string]string // values as text
	Links                     []string          // "traceid/spanid" of each link
	Events                    []string          // event names
	StatusError               string            // the status message of an error status
}

// StartOTLP starts a receiver.
func StartOTLP(tb testing.TB) *OTLPReceiver {
	tb.Helper()
	r := &OTLPReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(srv.Close)
	r.Endpoint = srv.URL
	return r
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "only POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &in); err != nil {
		http.Error(w, "not an ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []OTLPSpan
	for _, rs := range in.GetResourceSpans() {
		svc := attrsOf(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o := OTLPSpan{Service: svc, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrsOf(s.GetAttributes())}
				for _, l := range s.GetLinks() {
					o.Links = append(o.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				for _, e := range s.GetEvents() {
					o.Events = append(o.Events, e.GetName())
				}
				if s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
					o.StatusError = s.GetStatus().GetMessage()
				}
				got = append(got, o)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrsOf(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *OTLPReceiver) Spans() []OTLPSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]OTLPSpan(nil), r.spans...)
}

// Trace returns the received spans of one trace.
func (r *OTLPReceiver) Trace(traceID string) []OTLPSpan {
	var out []OTLPSpan
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Describe lists spans one per line, for failure messages.
func Describe(spans []OTLPSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s/%s parent %s [%s] %v\n", s.Name, s.TraceID, s.SpanID, s.ParentID, s.Service, s.Attrs)
	}
	return b.String()
}
