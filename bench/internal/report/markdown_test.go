package report

import (
	"strings"
	"testing"
)

func TestReplaceSectionAppendsOnce(t *testing.T) {
	orig := "# title\n\nsome text"
	out, err := replaceSection([]byte(orig), "first")
	if err != nil {
		t.Fatal(err)
	}
	want := orig + "\n\n" + Heading + "\n\n" + BeginMarker + "\nfirst\n" + EndMarker + "\n"
	if string(out) != want {
		t.Fatalf("got\n%q\nwant\n%q", out, want)
	}
	// The lead edits around the section; a second run replaces only the
	// marked part.
	edited := "# new title\n\n" + string(out) + "\n## later section\n"
	out2, err := replaceSection([]byte(edited), "second\n")
	if err != nil {
		t.Fatal(err)
	}
	want2 := strings.Replace(edited, "\nfirst\n", "\nsecond\n", 1)
	if string(out2) != want2 {
		t.Fatalf("got\n%q\nwant\n%q", out2, want2)
	}
	if strings.Count(string(out2), Heading) != 1 {
		t.Fatalf("heading duplicated:\n%s", out2)
	}
}

func TestReplaceSectionRefusesHalfMarkers(t *testing.T) {
	for _, in := range []string{"x\n" + BeginMarker + "\ny\n", EndMarker + "\n" + BeginMarker + "\n"} {
		if _, err := replaceSection([]byte(in), "body"); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		dq, aq float64
		want   string
	}{
		{100, 50, "2.0×"},
		{1, 250, "0.004× (1/250)"},
		{5, 0, "—"},
		{2500, 10, "250×"},
	} {
		if got := ratio(c.dq, c.aq); got != c.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", c.dq, c.aq, got, c.want)
		}
	}
}

func TestMarkdownHandling(t *testing.T) {
	r := &Results{Handling: []Handling{
		{System: "kafka-go", Phase: PhaseReady, Label: LabelHandleRaw, Tasks: 100, TasksPerSec: 1000, ProcCPUus: 4},
		{System: DelayQ, Phase: PhaseReady, Label: LabelHandleDQ, Tasks: 100, Concurrency: 64, TasksPerSec: 250, RedisCPUus: 10, ProcCPUus: 20, Handled: 100},
		{System: Asynq, Phase: PhaseReady, Label: LabelHandleAQ, Tasks: 100, Concurrency: 64, TasksPerSec: 125, RedisCPUus: 40, ProcCPUus: 30, Handled: 100},
		{System: DelayQ, Phase: PhaseE2E, Label: LabelE2EDQ, Tasks: 100, Concurrency: 64, TasksPerSec: 200, ScheduleS: 0.5, ScheduleRate: 200, RedisCPUus: 20},
		{System: Asynq, Phase: PhaseE2E, Label: LabelE2EAQ, Tasks: 100, Concurrency: 64, TasksPerSec: 100, ScheduleS: 0.2, ScheduleRate: 500, RedisCPUus: 40},
	}}
	md := r.Markdown("charts", "svg")
	for _, want := range []string{
		"| no-op handler, 100 tasks ready, one consumer of concurrency 64 (tasks/s) | 250 | 125 | 2.0× |",
		"| no-op handler, tasks ready: redis-server CPU per task (µs; lower is better) | 10.0 | 40.0 | 0.25× |",
		"| schedule → handled, 100 tasks due now (tasks/s) | 200 | 100 | 2.0× |",
		"| **250** | 25.0% |", // of raw, the same records
		"![handling throughput](charts/handling.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in\n%s", want, md)
		}
	}
	if !strings.Contains(md, "| **125** |  |") {
		t.Errorf("asynq's row has a share of the raw rate (raw reads delayq's records):\n%s", md)
	}
	if err := WriteCharts(t.TempDir(), "svg", r); err != nil {
		t.Fatal(err)
	}
}
