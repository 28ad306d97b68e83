package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
)

// The operator artifacts whose metric names are checked against what the
// binaries export (paths from the module root).
const (
	alertsFile    = "deploy/prometheus/alerts.yaml"
	alertsTest    = "deploy/prometheus/alerts_test.yaml"
	dashboardFile = "deploy/grafana/delayq.json"
	runbookFile   = "docs/runbook.md"
)

// requirePromtool finds promtool (Debian's prometheus package), or skips
// with a named reason — a failure when CI or DQ_REQUIRE_PROMTOOL is set.
func requirePromtool(t *testing.T) string {
	t.Helper()
	return requireTool(t, "alert rules check", "DQ_REQUIRE_PROMTOOL", "install Debian's prometheus package",
		func() (string, error) { return exec.LookPath("promtool") })
}

func readRoot(t *testing.T, rel string) []byte {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// promtool runs promtool with args in dir and fails the test with its
// output when it fails.
func promtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), bytes.TrimSpace(out))
}

// TestMetricsRules: the alert rules pass promtool check rules and their
// unit tests (each alert fires from synthetic series and stays quiet on
// healthy ones); every dashboard expression is valid PromQL (checked as a
// recording rule); every alert has a for:, a severity, a summary, a
// description and a runbook_url whose anchor is a heading of the runbook.
func TestMetricsRules(t *testing.T) {
	bin := requirePromtool(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	promtool(t, bin, root, "check", "rules", alertsFile)
	promtool(t, bin, filepath.Dir(filepath.Join(root, alertsTest)), "test", "rules", filepath.Base(alertsTest))

	// the dashboard's queries, with Grafana's interval variables replaced,
	// as recording rules
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range dashboardExprs(t, readRoot(t, dashboardFile)) {
		expr := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h").Replace(q.expr)
		b, _ := json.Marshal(expr) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      - record: dashboard:panel_%d:%d\n        expr: %s\n", q.panel, i, b)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, bin, dir, "check", "rules", "dashboard.yaml")

	anchors := runbookAnchors(readRoot(t, runbookFile))
	alerts := alertBlocks(readRoot(t, alertsFile))
	if len(alerts) < 6 {
		t.Fatalf("%s: %d alerts, want at least the six of the issue", alertsFile, len(alerts))
	}
	for name, block := range alerts {
		for _, want := range []string{"expr:", "for:", "severity:", "summary:", "description:", "runbook_url:"} {
			if !strings.Contains(block, want) {
				t.Errorf("alert %s lacks %s", name, want)
			}
		}
		if !strings.Contains(block, "{{ $labels.") && !strings.Contains(block, "{{ $value") {
			t.Errorf("alert %s: its annotations name no label or value", name)
		}
		m := regexp.MustCompile(`runbook_url: \S*docs/runbook\.md#(\S+)`).FindStringSubmatch(block)
		switch {
		case m == nil:
			t.Errorf("alert %s: runbook_url does not point into docs/runbook.md", name)
		case !anchors[m[1]]:
			t.Errorf("alert %s: runbook anchor #%s is no heading of %s (have %v)", name, m[1], runbookFile, keys(anchors))
		case m[1] != strings.ToLower(name):
			t.Errorf("alert %s: runbook anchor #%s, want #%s", name, m[1], strings.ToLower(name))
		}
	}
}

// TestMetricsExported: every metric the dashboard and the alert rules use
// is exported by a binary, with the labels they select and group by. It
// starts one daemon, event and work process, runs tasks through (one
// succeeds, one dies, one of a paused type is parked) so that counters
// and histograms with labels have series, and scrapes every /metrics.
func TestMetricsExported(t *testing.T) {
	var exprs []usedExpr
	for _, q := range dashboardExprs(t, readRoot(t, dashboardFile)) {
		exprs = append(exprs, usedExpr{where: fmt.Sprintf("%s panel %d", dashboardFile, q.panel), expr: q.expr})
	}
	for _, e := range alertExprs(readRoot(t, alertsFile)) {
		exprs = append(exprs, usedExpr{where: alertsFile + " " + e.alert, expr: e.expr})
	}
	if len(exprs) < 20 {
		t.Fatalf("found only %d expressions in the dashboard and the alerts", len(exprs))
	}

	rec := newRecorder(func(d delivery) (int, time.Duration) {
		if d.Type == "it.metrics.fail" {
			return http.StatusInternalServerError, 0
		}
		return http.StatusOK, 0
	})
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: rec})
	api := newAPI(c, 0)

	// pause a type first, so that its task is parked when it comes
	pauseURL := c.DaemonURL(0) + "/v1/types/it.metrics.paused/pause"
	resp, err := hc.Post(pauseURL, "application/json", nil)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", pauseURL, resp.Status, body)
	}
	tasks := []client.Task{
		{ID: "met-ok", Type: "it.metrics.ok", Payload: json.RawMessage(`{}`), Delay: 500 * time.Millisecond},
		{ID: "met-fail", Type: "it.metrics.fail", Payload: json.RawMessage(`{}`), MaxAttempts: 1},
		{ID: "met-paused", Type: "it.metrics.paused", Payload: json.RawMessage(`{}`), Delay: time.Second},
		{ID: "met-later", Type: "it.metrics.ok", Payload: json.RawMessage(`{}`), Delay: time.Hour},
	}
	for _, task := range tasks {
		if r, err := api.Schedule(t.Context(), task); err != nil || r.State != "scheduled" {
			t.Fatalf("schedule %s: %+v, %v", task.ID, r, err)
		}
	}
	waitState(t, api, []string{"met-ok"}, "succeeded", 30*time.Second)
	waitState(t, api, []string{"met-fail"}, "dead", 30*time.Second)
	waitState(t, api, []string{"met-paused"}, "paused", 30*time.Second)

	// Scrape until every name is there (a gauge read at an interval, e.g.
	// consumer lag, may lag behind the tasks), then report what is not.
	var missing []string
	var scraped scrape
	waitFor(t, 30*time.Second, "every metric of the dashboard and the alerts exported", func() (bool, string) {
		scraped = scrape{}
		for _, r := range Roles {
			if err := scraped.add(c.AdminURL(r, 0)+"/metrics", r); err != nil {
				return false, err.Error()
			}
		}
		missing = nil
		for _, e := range exprs {
			missing = append(missing, scraped.check(e)...)
		}
		return len(missing) == 0, fmt.Sprintf("%d problems, first: %s", len(missing), strings.Join(missing[:min(len(missing), 1)], ""))
	})
	// the work binary's collector default (internal/work/gc.go), from the
	// Go collector's go_gc_gogc_percent: 400, Go's 100 in the other
	// binaries (the binaries get only the DQ_* variables the test sets,
	// never a GOGC of the test's own environment)
	for _, r := range Roles {
		want := 100.0
		if r == Work {
			want = 400
		}
		if got, ok := metric(hc, c.AdminURL(r, 0), "go_gc_gogc_percent"); !ok || got != want {
			t.Errorf("%s: go_gc_gogc_percent %g (exported %v), want %g", r, got, ok, want)
		}
	}
	// every binary runs with the runtime's monitor kept out of its deep
	// sleep (config.KeepSysmonAwake): it executed itself again with the
	// setting, which the test's environment for it does not hold
	if lc, ok := c.(*localCluster); ok && runtime.GOOS == "linux" {
		for _, r := range Roles {
			env := lc.Environ(t, r, 0)
			if !slices.Contains(env, "GODEBUG="+config.SysmonGodebug) {
				t.Errorf("%s runs with environment %q, want GODEBUG=%s", r, env, config.SysmonGodebug)
			}
		}
	}
	names := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricNames(e.expr) {
			names[n] = true
		}
	}
	for _, n := range keys(names) {
		t.Logf("%-45s exported by %s", n, strings.Join(scraped.byWhom(n), ", "))
	}
}

// usedExpr is one PromQL expression of the dashboard or the alerts.
type usedExpr struct {
	where string
	expr  string
}

type panelExpr struct {
	panel int
	expr  string
}

// dashboardExprs is every target expression of the dashboard's panels
// (rows' nested panels included).
func dashboardExprs(t *testing.T, raw []byte) []panelExpr {
	t.Helper()
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
		Type    string   `json:"type"`
	}
	var d struct {
		SchemaVersion int     `json:"schemaVersion"`
		Panels        []panel `json:"panels"`
		Templating    struct {
			List []struct {
				Name, Type string
				Query      any
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("%s: schemaVersion %d", dashboardFile, d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Errorf("%s: no Prometheus datasource variable", dashboardFile)
	}
	var out []panelExpr
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d twice", dashboardFile, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %d (%s) has no query", dashboardFile, p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %d (%s): empty expression", dashboardFile, p.ID, p.Title)
					continue
				}
				out = append(out, panelExpr{panel: p.ID, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type alertExpr struct {
	alert string
	expr  string
}

// alertBlocks splits the rules file into its alerts' text, by name.
func alertBlocks(raw []byte) map[string]string {
	out := map[string]string{}
	parts := regexp.MustCompile(`(?m)^\s*- alert: *`).Split(string(raw), -1)
	for _, p := range parts[1:] {
		name, rest, _ := strings.Cut(p, "\n")
		out[strings.TrimSpace(name)] = rest
	}
	return out
}

// alertExprs is every alert's expr (inline, or a block scalar).
func alertExprs(raw []byte) []alertExpr {
	var out []alertExpr
	for name, block := range alertBlocks(raw) {
		lines := strings.Split(block, "\n")
		for i, l := range lines {
			trimmed := strings.TrimSpace(l)
			v, ok := strings.CutPrefix(trimmed, "expr:")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			if v != "|" && v != ">" && v != "|-" && v != ">-" {
				out = append(out, alertExpr{alert: name, expr: v})
				continue
			}
			indent := len(l) - len(strings.TrimLeft(l, " "))
			var b strings.Builder
			for _, next := range lines[i+1:] {
				if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
					break
				}
				b.WriteString(next + "\n")
			}
			out = append(out, alertExpr{alert: name, expr: b.String()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].alert < out[j].alert })
	return out
}

// runbookAnchors are the GitHub anchors of the runbook's headings.
func runbookAnchors(raw []byte) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		h, ok := strings.CutPrefix(l, "#")
		if !ok {
			continue
		}
		h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
		a := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				return r
			case r == ' ':
				return '-'
			}
			return -1
		}, h)
		out[a] = true
	}
	return out
}

var (
	metricRe   = regexp.MustCompile(`\bdelayq_[a-z0-9_]+\b`)
	selectorRe = regexp.MustCompile(`\b(delayq_[a-z0-9_]+)\s*\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
)

// metricNames are the delayq metric names an expression reads.
func metricNames(expr string) []string {
	seen := map[string]bool{}
	for _, n := range metricRe.FindAllString(expr, -1) {
		seen[n] = true
	}
	return keys(seen)
}

// scrape is what the binaries export: sample name (as exposed, so a
// histogram shows as _bucket, _sum and _count) -> label name -> values,
// and which binary exported it.
type scrape struct {
	labels map[string]map[string]map[string]bool
	by     map[string]map[Role]bool
}

func (s *scrape) add(url string, r Role) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if s.labels == nil {
		s.labels, s.by = map[string]map[string]map[string]bool{}, map[string]map[Role]bool{}
	}
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, err := parseSample(line)
		if err != nil {
			return fmt.Errorf("%s line %d: %w: %q", url, i+1, err, line)
		}
		if s.labels[name] == nil {
			s.labels[name], s.by[name] = map[string]map[string]bool{}, map[Role]bool{}
		}
		s.by[name][r] = true
		for k, v := range labels {
			if s.labels[name][k] == nil {
				s.labels[name][k] = map[string]bool{}
			}
			s.labels[name][k][v] = true
		}
	}
	return nil
}

func (s *scrape) byWhom(name string) []string {
	var out []string
	for _, r := range Roles {
		if s.by[name][r] {
			out = append(out, string(r))
		}
	}
	return out
}

// targetLabels are added by Prometheus when it scrapes, not by delayq.
var targetLabels = map[string]bool{"instance": true, "job": true, "": true}

// check names what e uses that no binary exports: metric names, the
// labels of its matchers (and the values of its = matchers), and the
// labels it groups or matches by.
func (s *scrape) check(e usedExpr) []string {
	var out []string
	have := map[string]bool{}
	for _, n := range metricNames(e.expr) {
		ls, ok := s.labels[n]
		if !ok {
			hint := ""
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(n, suf); cut {
					if _, isFamily := s.labels[base]; isFamily {
						hint = fmt.Sprintf(" (%s is not a histogram or summary)", base)
					}
				}
			}
			out = append(out, fmt.Sprintf("%s: metric %s is exported by no binary%s", e.where, n, hint))
			continue
		}
		for l := range ls {
			have[l] = true
		}
	}
	for _, m := range selectorRe.FindAllStringSubmatch(e.expr, -1) {
		name, ls := m[1], s.labels[m[1]]
		if ls == nil {
			continue // reported above
		}
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			label, op, value := mm[1], mm[2], mm[3]
			switch {
			case ls[label] == nil:
				out = append(out, fmt.Sprintf("%s: %s has no label %s", e.where, name, label))
			case op == "=" && !ls[label][value]:
				out = append(out, fmt.Sprintf("%s: %s has no series with %s=%q (have %v)", e.where, name, label, value, keys(ls[label])))
			}
		}
	}
	for _, m := range groupingRe.FindAllStringSubmatch(e.expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			l = strings.TrimSpace(l)
			if !targetLabels[l] && !have[l] {
				out = append(out, fmt.Sprintf("%s: groups or matches by %q, which none of its metrics has", e.where, l))
			}
		}
	}
	return out
}

// parseSample reads the name and labels of one sample line of the
// Prometheus text format.
func parseSample(line string) (string, map[string]string, error) {
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return "", nil, errors.New("no metric name")
	}
	name, rest := line[:end], line[end:]
	labels := map[string]string{}
	if rest[0] != '{' {
		return name, labels, nil
	}
	rest = rest[1:]
	for {
		rest = strings.TrimLeft(rest, " ,")
		if rest == "" {
			return "", nil, errors.New("unterminated labels")
		}
		if rest[0] == '}' {
			return name, labels, nil
		}
		eq := strings.Index(rest, `="`)
		if eq <= 0 {
			return "", nil, errors.New("label without value")
		}
		key := rest[:eq]
		rest = rest[eq+2:]
		var v strings.Builder
		closed := false
		for i := 0; i < len(rest); i++ {
			c := rest[i]
			if c == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(rest[i])
				}
				continue
			}
			if c == '"' {
				rest, closed = rest[i+1:], true
				break
			}
			v.WriteByte(c)
		}
		if !closed {
			return "", nil, errors.New("unterminated label value")
		}
		labels[key] = v.String()
	}
}

// TestMetricsParseSample: the scrape parser reads labels whose values hold
// braces, spaces, commas and escaped quotes (route patterns do).
func TestMetricsParseSample(t *testing.T) {
	name, ls, err := parseSample(`delayq_http_requests_total{code="200",route="GET /v1/tasks/{id}",x="a\"b,c}"} 3`)
	if err != nil || name != "delayq_http_requests_total" || ls["route"] != "GET /v1/tasks/{id}" || ls["x"] != `a"b,c}` || ls["code"] != "200" {
		t.Fatalf("%q %v %v", name, ls, err)
	}
	if name, ls, err := parseSample(`delayq_journal_depth 0`); err != nil || name != "delayq_journal_depth" || len(ls) != 0 {
		t.Fatalf("%q %v %v", name, ls, err)
	}
	for _, bad := range []string{`x{a="b`, `x{a}`, `{a="b"} 1`} {
		if _, _, err := parseSample(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	s := scrape{labels: map[string]map[string]map[string]bool{
		"delayq_fire_lag_seconds_bucket": {"le": {"1": true}},
		"delayq_fired_total":             {},
		"delayq_work_handled_total":      {"outcome": {"succeeded": true}, "type": {"a": true}},
	}}
	got := s.check(usedExpr{where: "t", expr: `histogram_quantile(0.99, sum by (le) (rate(delayq_fire_lag_seconds_bucket[5m])))
		+ sum by (shard) (rate(delayq_fired_total_count[5m])) + sum(delayq_work_handled_total{outcome="dead",kind=~"x"})`})
	want := []string{
		"metric delayq_fired_total_count is exported by no binary",
		`has no series with outcome="dead"`,
		"has no label kind",
		`groups or matches by "shard"`,
	}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d: %q, want it to say %q", i, got[i], w)
		}
	}
	if !slices.Contains(metricNames("rate(delayq_a_total[5m]) / delayq_b"), "delayq_b") {
		t.Error("metricNames")
	}
}
