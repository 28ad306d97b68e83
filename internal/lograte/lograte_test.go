package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestWarnerHoldsBackAndCounts(t *testing.T) {
	var buf bytes.Buffer
	w := &Warner{Log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), Every: 50 * time.Millisecond}
	w.Warn("dropped", "n", 1)
	w.Warn("dropped", "n", 2)
	w.Warn("dropped", "n", 3)
	time.Sleep(60 * time.Millisecond) // past the period
	w.Warn("dropped", "n", 4)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"level=WARN", "level=DEBUG", "level=DEBUG", "level=WARN"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q, want %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[3], "suppressed_since_last=2") || strings.Contains(lines[0], "suppressed") {
		t.Errorf("suppressed count: %q / %q", lines[0], lines[3])
	}
}
