package report

import (
	"slices"
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

// The single-task bars take each ratio within a round, and the section
// shows every round's ratio, the median and how many rounds reach the bar.
func TestSingleRatiosOverRounds(t *testing.T) {
	row := func(label string, rate float64) Throughput { return Throughput{Label: label, TasksPerSec: rate} }
	r := &Results{
		Throughput: []Throughput{row(LabelDQEmbeddedSingle, 900), row(LabelAQEnqueue16, 1000), row(LabelDQClientSingle, 500),
			row(LabelDQEmbeddedWide, 1600), row(LabelAQEnqueue64, 1000)},
		Rounds: []Round{
			{Round: 2, Rows: []Throughput{row(LabelAQEnqueue16, 500), row(LabelDQEmbeddedSingle, 550), row(LabelDQClientSingle, 350)}},
			{Round: 3, Rows: []Throughput{row(LabelDQEmbeddedSingle, 1200), row(LabelAQEnqueue16, 1000), row(LabelDQClientSingle, 700)}},
		},
	}
	ts := r.SingleRatios()
	emb := ts[0]
	if emb.DQ != LabelDQEmbeddedSingle || !slices.Equal(emb.Measured, []float64{0.9, 1.1, 1.2}) {
		t.Fatalf("embedded ratios %+v", emb)
	}
	if emb.Median() != 1.1 || emb.Met() != 2 {
		t.Errorf("median %v, met %d", emb.Median(), emb.Met())
	}
	if cl := ts[1]; !slices.Equal(cl.Measured, []float64{0.5, 0.7, 0.7}) || cl.Met() != 2 {
		t.Errorf("client %+v", cl)
	}
	// the x64 rows ran in round 1 only
	if wide := ts[2]; len(wide.Measured) != 1 || wide.Median() != 1.6 || wide.Met() != 1 {
		t.Errorf("x64 %+v", wide)
	}
	if got := ts[1].Summary(); !strings.Contains(got, "median 0.70x, 0.50-0.70x over 3 round(s) (0.50, 0.70, 0.70)") || !strings.Contains(got, "reached in 2 of 3") {
		t.Errorf("summary %q", got)
	}
	md := r.Markdown("bench", "svg")
	for _, want := range []string{"### Single-task scheduling over 3 rounds",
		"| embedded.Producer ×16 / asynq ×16 | ≥ 1.0× | 0.90, 1.10, 1.20 | 1.10× | 0.90–1.20× | 2 of 3 |",
		"| embedded.Producer ×64 / asynq ×64 | ≥ 1.5× | 1.60 | 1.60× | 1.60–1.60× | 1 of 1 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	// one round: no rounds section
	if md := (&Results{Throughput: r.Throughput}).Markdown("bench", "svg"); strings.Contains(md, "over 1 rounds") || strings.Contains(md, "Single-task scheduling over") {
		t.Errorf("a run of one round has a rounds section")
	}
}
