package tracing

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Printer is a span exporter that writes one line per span, for a
// person to read (dq dev --trace, OTEL_TRACES_EXPORTER=console): the
// trace id, the span's name, its service, its duration and its
// attributes, indented under the span of the same trace it names as
// parent when that was printed.
type Printer struct {
	mu    sync.Mutex
	w     io.Writer
	depth map[string]int // span id -> depth, of the spans printed (bounded)
	order []string
}

// NewPrinter writes spans to w.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w, depth: map[string]int{}} }

func (p *Printer) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].StartTime().Before(spans[j].StartTime()) })
	for _, s := range spans {
		d := 0
		if s.Parent().IsValid() {
			if pd, ok := p.depth[s.Parent().SpanID().String()]; ok {
				d = pd + 1
			}
		}
		id := s.SpanContext().SpanID().String()
		p.depth[id] = d
		p.order = append(p.order, id)
		if len(p.order) > 10000 {
			delete(p.depth, p.order[0])
			p.order = p.order[1:]
		}
		var b strings.Builder
		svc := ""
		if v, ok := s.Resource().Set().Value("service.name"); ok {
			svc = v.AsString()
		}
		fmt.Fprintf(&b, "trace %s %s%s [%s] %s", s.SpanContext().TraceID(), strings.Repeat("  ", d), s.Name(), svc,
			s.EndTime().Sub(s.StartTime()).Round(10*time.Microsecond))
		for _, a := range s.Attributes() {
			fmt.Fprintf(&b, " %s=%s", a.Key, a.Value.String())
		}
		if st := s.Status(); st.Description != "" {
			fmt.Fprintf(&b, " error=%q", st.Description)
		}
		b.WriteByte('\n')
		if _, err := io.WriteString(p.w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

func (p *Printer) Shutdown(context.Context) error { return nil }
