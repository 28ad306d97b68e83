package engine

import (
	"context"
	"log/slog"
)

// recordHandler is a slog.Handler that adds a record's context attributes
// (task id, generation, topic, partition, offset) only when something is
// logged. Logger.With would format them for every record handled (the JSON
// and text handlers pre-format With attributes), and almost no record is
// ever logged about. It keeps the values themselves, not attributes, and
// lives in the record's item (initLogger): a record's logger costs no
// allocation of its own.
type recordHandler struct {
	base      slog.Handler
	id        string
	gen       uint64
	topic     string
	partition int
	offset    int64
}

func (h *recordHandler) attrs() []slog.Attr {
	return []slog.Attr{
		slog.String("task_id", h.id), slog.Uint64("gen", h.gen), slog.String("topic", h.topic),
		slog.Int("partition", h.partition), slog.Int64("offset", h.offset),
	}
}

func (h *recordHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.base.Enabled(ctx, l)
}

func (h *recordHandler) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	nr.AddAttrs(h.attrs()...)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(a)
		return true
	})
	return h.base.Handle(ctx, nr)
}

func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return h.base.WithAttrs(append(h.attrs(), as...))
}

func (h *recordHandler) WithGroup(name string) slog.Handler {
	return h.base.WithAttrs(h.attrs()).WithGroup(name)
}

// initLogger sets it.log: l with the attributes of its record, without
// an allocation (see recordHandler).
func (it *item) initLogger(l *slog.Logger) {
	m := it.m
	it.logh = recordHandler{base: l.Handler(), id: it.rec.ID, gen: it.rec.Gen, topic: m.Topic, partition: m.Partition, offset: m.Offset}
	it.logv = *slog.New(&it.logh)
	it.log = &it.logv
}
