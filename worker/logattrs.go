package worker

import (
	"context"
	"log/slog"
)

// lazyAttrs is a slog.Handler that adds a record's context attributes
// (task id, generation, topic, partition, offset) only when something is
// logged. Logger.With would format them for every record handled (the JSON
// and text handlers pre-format With attributes), and almost no record is
// ever logged about.
type lazyAttrs struct {
	base  slog.Handler
	attrs []slog.Attr
}

// recordLogger returns l with the attributes of one fetched record.
func recordLogger(l *slog.Logger, id string, gen uint64, topic string, partition int, offset int64) *slog.Logger {
	return slog.New(&lazyAttrs{base: l.Handler(), attrs: []slog.Attr{
		slog.String("task_id", id), slog.Uint64("gen", gen), slog.String("topic", topic),
		slog.Int("partition", partition), slog.Int64("offset", offset),
	}})
}

func (h *lazyAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.base.Enabled(ctx, l) }

func (h *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	nr.AddAttrs(h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(a)
		return true
	})
	return h.base.Handle(ctx, nr)
}

func (h *lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return h.base.WithAttrs(append(append([]slog.Attr(nil), h.attrs...), as...))
}

func (h *lazyAttrs) WithGroup(name string) slog.Handler {
	return h.base.WithAttrs(h.attrs).WithGroup(name)
}
