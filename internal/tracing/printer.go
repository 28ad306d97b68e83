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
//
// A child ends before its parent, so a batch can carry a child whose
// parent of the same process (a local parent) comes in the next batch:
// such a child is held until its parent is printed (then it follows it,
// indented), for at most holdLocal, or until Shutdown. A child of a remote
// parent (from another process, through a Kafka header or traceparent)
// is never held: its parent may be printed elsewhere or not at all.
type Printer struct {
	mu    sync.Mutex
	w     io.Writer
	depth map[string]int // span id -> depth, of the spans printed (bounded)
	order []string
	held  []heldSpan // children waiting for their local parent
	now   func() time.Time
}

type heldSpan struct {
	s     sdktrace.ReadOnlySpan
	since time.Time
}

// holdLocal bounds how long a child waits for its local parent (a parent
// that never ends: the child is printed unindented).
const holdLocal = 5 * time.Second

// NewPrinter writes spans to w.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w, depth: map[string]int{}, now: time.Now} }

func (p *Printer) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.print(spans, false)
}

// print writes the held spans and spans in start order (a parent of the
// same batch before its children), holding again a child whose local
// parent is still to come, unless all.
func (p *Printer) print(spans []sdktrace.ReadOnlySpan, all bool) error {
	now := p.now()
	since := make(map[string]time.Time, len(p.held))
	for _, h := range p.held {
		spans = append(spans, h.s)
		since[h.s.SpanContext().SpanID().String()] = h.since
	}
	p.held = p.held[:0]
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].StartTime().Before(spans[j].StartTime()) })
	for _, s := range spans {
		id := s.SpanContext().SpanID().String()
		d := 0
		if par := s.Parent(); par.IsValid() {
			pd, ok := p.depth[par.SpanID().String()]
			if ok {
				d = pd + 1
			} else if t, seen := since[id]; !all && !par.IsRemote() && (!seen || now.Sub(t) < holdLocal) {
				if !seen {
					t = now
				}
				p.held = append(p.held, heldSpan{s: s, since: t})
				continue
			}
		}
		if err := p.write(s, id, d); err != nil {
			return err
		}
	}
	return nil
}

// write prints one span at depth d and remembers its depth.
func (p *Printer) write(s sdktrace.ReadOnlySpan, id string, d int) error {
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
	_, err := io.WriteString(p.w, b.String())
	return err
}

// Shutdown prints the spans still held.
func (p *Printer) Shutdown(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.print(nil, true)
}
