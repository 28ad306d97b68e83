// Command compare runs the same workloads against delayq and hibiken/asynq
// on one redis-server, in one run, and publishes the figures (issue #5):
//
//	cd bench && go run ./cmd/compare [-short] [-out FILE] [-charts DIR] [-md FILE]
//
// It writes the JSON results, the SVG charts and the section between the
// compare markers of docs/benchmarks.md. See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/delayq/delayq/bench/internal/host"
	"github.com/delayq/delayq/bench/internal/report"
	"github.com/delayq/delayq/bench/internal/systems"
	"github.com/delayq/delayq/bench/internal/tbenv"
)

func main() {
	short := flag.Bool("short", false, "small task counts and durations (under 2 minutes)")
	out := flag.String("out", "", "JSON results file (default <repo>/docs/bench/results.json)")
	charts := flag.String("charts", "", "directory of the SVG charts (default <repo>/docs/bench)")
	md := flag.String("md", "", "Markdown file whose compare section is replaced (default <repo>/docs/benchmarks.md)")
	format := flag.String("format", "svg", "chart format: svg or png")
	only := flag.String("only", "", "comma-separated workloads to run (throughput,memory,steady,spike,churn,handling; default all) — for development")
	rounds := flag.Int("rounds", 1, "times the single-task rows of the throughput workload run, alternating which system goes first; the verdict gives each ratio's median and range")
	flag.Parse()
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "compare: -rounds must be at least 1")
		os.Exit(2)
	}
	if *format != "svg" && *format != "png" {
		fmt.Fprintln(os.Stderr, "compare: -format must be svg or png")
		os.Exit(2)
	}

	root, err := host.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	*out = orDefault(*out, filepath.Join(root, "docs", "bench", "results.json"))
	*charts = orDefault(*charts, filepath.Join(root, "docs", "bench"))
	*md = orDefault(*md, filepath.Join(root, "docs", "benchmarks.md"))

	tb := tbenv.New("compare", os.Stderr)
	tb.FatalOnSignal("stopping")

	start := time.Now()
	p := fullPlan
	if *short {
		p = shortPlan
	}
	r := &report.Results{Short: *short, Started: start, Command: command()}
	in := systems.StartInfra(tb)
	r.Machine = describeMachine(tb.Context(), in)
	fmt.Printf("# %s\n# machine: %d CPUs (%s), %s, %s, redis-server %s, asynq %s, load average %s\n",
		r.Command, r.Machine.CPUs, r.Machine.CPUModel, r.Machine.OS, r.Machine.GoVersion, r.Machine.RedisVersion, r.Machine.AsynqVersion, r.Machine.LoadStart)
	r.Settings = settings(p)

	b := &bench{tb: tb, in: in, p: p, r: r, rounds: *rounds}
	for _, w := range []struct {
		name string
		run  func()
	}{
		{"throughput", b.throughput},
		{"memory", b.memory},
		{"steady", b.steady},
		{"spike", b.spike},
		{"churn", b.churn},
		{"handling", b.handling},
	} {
		if *only != "" && !containsWord(*only, w.name) {
			continue
		}
		t0 := time.Now()
		fmt.Printf("\n## %s\n", w.name)
		w.run()
		fmt.Printf("## %s done in %v\n", w.name, time.Since(t0).Round(100*time.Millisecond))
	}
	r.Machine.LoadEnd = host.LoadAverage()
	b.verdict()
	r.Notes = append(r.Notes, b.notes...)
	r.ElapsedS = time.Since(start).Seconds()

	if err := report.WriteJSON(*out, r); err != nil {
		tb.Fatalf("write %s: %v", *out, err)
	}
	if err := report.WriteCharts(*charts, *format, r); err != nil {
		tb.Fatalf("charts in %s: %v", *charts, err)
	}
	rel, err := filepath.Rel(filepath.Dir(*md), *charts)
	if err != nil {
		rel = *charts
	}
	if err := report.ReplaceSection(*md, r.Markdown(filepath.ToSlash(rel), *format)); err != nil {
		tb.Fatalf("update %s: %v", *md, err)
	}
	tb.Close()
	fmt.Printf("\nwrote %s, charts in %s, section of %s\nelapsed %v\n", *out, *charts, *md, time.Since(start).Round(time.Second))
	if tb.Failed() {
		os.Exit(1)
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func containsWord(list, w string) bool {
	for _, x := range strings.Split(list, ",") {
		if strings.TrimSpace(x) == w {
			return true
		}
	}
	return false
}

// command is the exact command line, as run from the repository root.
func command() string {
	args := append([]string{"go", "-C", "bench", "run", "./cmd/compare"}, os.Args[1:]...)
	return strings.Join(args, " ")
}

// ctx is the context of a workload's calls.
func (b *bench) ctx() context.Context { return b.tb.Context() }
