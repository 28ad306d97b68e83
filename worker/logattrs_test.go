package worker

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestRecordLoggerAddsItsAttributesOnlyWhenLogging(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "worker")
	l := recordLogger(base, "t-1", 7, "dq.tasks", 3, 42)
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
