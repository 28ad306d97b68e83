package fire

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/tracing"
)

// The spans of a batch, made only while tracing is on (tracing.On; a
// batch's trace is nil otherwise, and every method below is then a no-op
// on a nil receiver: nothing is allocated per task):
//
//   - delayq.fire.batch (internal, a root: the take loop is a background
//     loop), from the take to the settle, linked to the delayq.fire spans
//     of its tasks (at most maxBatchLinks); only for a take with at least
//     one traced task, so that an idle or untraced shard makes no traces;
//   - delayq.fire (producer), per task that carries a trace context, a
//     child of it, from the take to its record's fate (settled, parked,
//     dead, released); the record's traceparent names it, so that the
//     consumer's span is its child. It links to its batch's span.

// maxBatchLinks bounds the links of a batch span (the SDK's default link
// limit); the rest are counted in delayq.links_dropped.
const maxBatchLinks = 128

// The fates of a task's record (delayq.fate on its delayq.fire span).
const (
	fateFired      = "fired"       // in Kafka, the receipt stored
	fateDelivered  = "delivered"   // in Kafka, a topic no work process handles: delivered
	fateReleased   = "released"    // Kafka did not confirm it: back in the due set
	fateParked     = "parked"      // Kafka refused it for good: fired again after a while
	fateDead       = "dead"        // Kafka refused it for good past its grace: dead
	fateDeadLetter = "dead_letter" // unreadable: written to the dead-letter topic
	fateUnsettled  = "unsettled"   // the take's settle was not stored: it fires again
)

// fireTrace is the spans of one batch.
type fireTrace struct {
	batch   trace.Span
	spans   []trace.Span // by task index; nil: the task carries no trace context
	fates   []string     // set by the poison settle (parked, dead)
	traced  int          // tasks with a delayq.fire span
	deadIdx []int        // the task of each dead-letter record of notifyDead
}

// startTrace starts the batch's spans and points each traced task's
// record at its delayq.fire span. The spans start at takeAt (the local
// time the take was asked for). Called only when tracing.On().
func (p *Poller) startTrace(ctx context.Context, b *batch, takeAt time.Time) {
	tasks := b.taken.Tasks
	// a take without a traced task makes no span: the poller's loop
	// would otherwise start a root trace per take
	if !slices.ContainsFunc(tasks, func(t *task.Task) bool { return t.Headers[tracing.HeaderTraceparent] != "" }) {
		return
	}
	tr := tracing.Tracer()
	ctx, bspan := tr.Start(ctx, "delayq.fire.batch", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(takeAt), trace.WithAttributes(
			attribute.Int("delayq.shard", p.cfg.Shard),
			attribute.Int("delayq.tasks", len(tasks)),
			attribute.Int64("delayq.token", p.cfg.Token),
		))
	ft := &fireTrace{batch: bspan}
	b.tr = ft
	ahead := !b.taken.FireAt.IsZero()
	if ahead {
		bspan.AddEvent("due", trace.WithTimestamp(b.start))
	}
	toBatch := trace.WithLinks(trace.Link{SpanContext: bspan.SpanContext()})
	dropped := 0
	for i, t := range tasks {
		if t.Headers[tracing.HeaderTraceparent] == "" {
			continue
		}
		pctx := tracing.ContextOfTask(ctx, t.Headers)
		if !trace.SpanContextFromContext(pctx).IsValid() {
			continue // unreadable: the record keeps it as it is
		}
		if ft.spans == nil {
			ft.spans = make([]trace.Span, len(tasks))
			ft.fates = make([]string, len(tasks))
		}
		m := &b.msgs[i]
		_, s := tr.Start(pctx, "delayq.fire", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithTimestamp(takeAt), toBatch, trace.WithAttributes(
				attribute.String("delayq.task.id", t.ID),
				attribute.String("delayq.task.type", t.Type),
				attribute.Int("delayq.shard", p.cfg.Shard),
				attribute.Int64("delayq.gen", int64(t.Gen)), //nolint:gosec // a generation stays far below 2^63
				attribute.Int("delayq.attempt", max(t.Attempt, 1)),
				attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", m.Topic),
				attribute.Int64("delayq.due_at", t.DueAt.UnixMilli()),
				attribute.Int64("delayq.lateness_ms", b.firedAt.Sub(t.DueAt).Milliseconds()),
			))
		if ahead {
			s.AddEvent("due", trace.WithTimestamp(b.start))
		}
		ft.spans[i] = s
		ft.traced++
		tracing.SetRecordParent(m, s)
		if ft.traced <= maxBatchLinks {
			bspan.AddLink(trace.Link{SpanContext: s.SpanContext()})
		} else {
			dropped++
		}
	}
	if dropped > 0 {
		bspan.SetAttributes(attribute.Int("delayq.links_dropped", dropped))
	}
}

// produced records Kafka's answer per record: an event "produced" with
// where Kafka put it, or the error.
func (ft *fireTrace) produced(b *batch) {
	if ft == nil || ft.traced == 0 {
		return
	}
	for i, s := range ft.spans {
		if s == nil {
			continue
		}
		if e := b.errs[i]; e != nil {
			s.RecordError(e)
			msg := "kafka did not confirm the record"
			if class := Refusal(e); class != "" {
				msg = "kafka refused the record for good (" + class + ")"
				s.SetAttributes(attribute.String("delayq.refusal", class))
			}
			s.SetStatus(codes.Error, msg+": "+e.Error())
			continue
		}
		part := attribute.String("messaging.destination.partition.id", strconv.Itoa(b.msgs[i].Partition))
		off := attribute.Int64("messaging.kafka.offset", b.msgs[i].Offset)
		s.SetAttributes(part, off)
		s.AddEvent("produced", trace.WithAttributes(part, off))
	}
}

// poisoned records the settle of task i, refused for good: parked or dead.
func (ft *fireTrace) poisoned(i int, fate string) {
	if ft == nil || ft.spans == nil || ft.spans[i] == nil {
		return
	}
	ft.fates[i] = fate
}

// deadLetter points the dead-letter record m of task i, made dead at
// fire time, at its delayq.fire span.
func (ft *fireTrace) deadLetter(i int, m *kafka.Message) {
	if ft == nil {
		return
	}
	ft.deadIdx = append(ft.deadIdx, i)
	if i < len(ft.spans) && ft.spans[i] != nil {
		tracing.SetRecordParent(m, ft.spans[i])
	}
}

// deadNotified records Kafka's answer to the dead-letter records.
func (ft *fireTrace) deadNotified(errs []error) {
	if ft == nil || ft.spans == nil {
		return
	}
	for j, e := range errs {
		if j >= len(ft.deadIdx) {
			break
		}
		s := ft.spans[ft.deadIdx[j]]
		switch {
		case s == nil:
		case e != nil:
			s.AddEvent("dead letter not written", trace.WithAttributes(attribute.String("error", e.Error())))
		default:
			s.AddEvent("dead letter written")
		}
	}
}

// endTrace ends the batch's spans once every record's fate is known;
// r.err is the batch's error (a fenced settle).
func (p *Poller) endTrace(b *batch, r batchResult) {
	ft := b.tr
	if ft == nil {
		return
	}
	now := time.Now()
	for i, s := range ft.spans {
		if s == nil {
			continue
		}
		s.SetAttributes(attribute.String("delayq.fate", p.fateOf(b, i, r.err)))
		s.End(trace.WithTimestamp(now))
	}
	ft.batch.SetAttributes(attribute.Int("delayq.released", r.failed))
	if r.err != nil {
		ft.batch.RecordError(r.err)
		ft.batch.SetStatus(codes.Error, r.err.Error())
	}
	ft.batch.End(trace.WithTimestamp(now))
}

// fateOf is what became of task i's record.
func (p *Poller) fateOf(b *batch, i int, err error) string {
	switch {
	case b.tr.fates[i] != "":
		return b.tr.fates[i]
	case err != nil || !b.stored:
		return fateUnsettled
	case b.errs[i] != nil:
		return fateReleased
	case b.dead[i]:
		return fateDeadLetter
	case p.cfg.Worked != nil && !p.cfg.Worked(b.msgs[i].Topic):
		return fateDelivered
	}
	return fateFired
}
