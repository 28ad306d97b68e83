package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
)

func TestRecordLoggerAddsItsAttributesOnlyWhenLogging(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "worker")
	it := &item{m: &kafka.Message{Topic: "dq.tasks", Partition: 3, Offset: 42}, rec: &record.Fields{ID: "t-1", Gen: 7}}
	it.initLogger(base)
	l := it.log
	l.Debug("not shown")
	if buf.Len() != 0 {
		t.Fatalf("a disabled level wrote %q", buf.String())
	}
	l.Warn("outcome not stored", "err", "boom")
	got := buf.String()
	want := `level=WARN msg="outcome not stored" component=worker task_id=t-1 gen=7 topic=dq.tasks partition=3 offset=42 err=boom`
	if !strings.Contains(got, want) {
		t.Fatalf("got %q\nwant it to contain %q", got, want)
	}
	buf.Reset()
	l.With("k", "v").WithGroup("g").Info("x", "a", 1)
	if got := buf.String(); !strings.Contains(got, `component=worker task_id=t-1 gen=7 topic=dq.tasks partition=3 offset=42 k=v g.a=1`) {
		t.Fatalf("With/WithGroup: %q", got)
	}
}
