//go:build !dqslim

package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// TestDevTrace: dq dev --trace prints the spans of a task's trace, one
// line each, the request's, the fire's, the attempt's and the webhook
// call's, all of one trace, each indented under its parent.
func TestDevTrace(t *testing.T) {
	d := startDevAll(t, devOptions{shards: 4, redis: "redis-server", trace: true})
	if _, err := client.New(d.api).Schedule(t.Context(), client.Task{ID: "traced-1", Type: "mine", Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	testenv.WaitFor(t, 30*time.Second, "the task's spans printed", func() bool {
		lines = lines[:0]
		for _, l := range strings.Split(d.out.String(), "\n") {
			if strings.HasPrefix(l, "trace ") {
				lines = append(lines, l)
			}
		}
		return strings.Contains(d.out.String(), "delayq.webhook [delayq-dev]")
	})
	// the request's span starts the trace; the others follow it, deeper
	var trace string
	depth := map[string]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		rest := strings.TrimPrefix(l, "trace "+f[1]+" ")
		name := strings.Fields(rest)[0]
		if name == "POST" && strings.Contains(l, "delayq.task.id=traced-1") {
			trace = f[1]
		}
		if f[1] == trace {
			depth[name] = len(rest) - len(strings.TrimLeft(rest, " "))
		}
	}
	if trace == "" {
		t.Fatalf("no request span for traced-1:\n%s", strings.Join(lines, "\n"))
	}
	for i, name := range []string{"POST", "delayq.fire", "delayq.attempt", "delayq.webhook"} {
		if d, ok := depth[name]; !ok || d != 2*i {
			t.Errorf("span %s of trace %s: indent %d (printed: %v), want %d\n%s", name, trace, d, ok, 2*i, strings.Join(lines, "\n"))
		}
	}
}
