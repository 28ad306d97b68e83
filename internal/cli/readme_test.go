//go:build !dqslim

package cli

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestReadmeWalkthrough runs the README's walkthrough as a reader would,
// line by line, against a real dq dev: every dq command must succeed, and
// what the comments promise is checked where a comment says it.
//
//   - "export DQ_ADDR=…" points the following commands at this dq dev (a
//     free port, not 7070).
//   - a `dq get ID` line whose comment starts with a state name ("state:
//     scheduled", "succeeded, …", "dead after …") is repeated until its
//     output names that state (a reader waits for it), at most 45 s; "attempt
//     N of M", "died_at" and "its attempts: a, b, …" (the attempt history's
//     outcomes, in order) in the comment must show in the output too.
//   - a comment line saying what "dq dev prints" must come true: each
//     quoted text (and each task_id=ID) shows in dq dev's output.
//   - a `dq tasks list` or `dq dead list` line must list the ids its
//     comment names ("both" = the two ids scheduled just before).
//
// The README is the front page: a walkthrough that drifted from the
// commands fails here.
func TestReadmeWalkthrough(t *testing.T) {
	block := readmeWalkthrough(t)
	o, err := parseDevArgs(Env{Getenv: func(string) string { return "" }}, []string{"--shards", "4", "--redis-server", "redis-server"})
	if err != nil {
		t.Fatal(err)
	}
	d := startDevAll(t, o)
	env := map[string]string{}
	var recent []string // ids of the latest dq schedule lines, for "both"
	ran := 0
	for _, line := range strings.Split(block, "\n") {
		cmd, comment := splitComment(line)
		words := shellWords(t, cmd)
		switch {
		case len(words) == 0 && strings.Contains(comment, "dq dev prints"):
			waitPrinted(t, d, comment)
		case len(words) == 0:
		case words[0] == "export":
			k, _, _ := strings.Cut(words[1], "=")
			if k != "DQ_ADDR" {
				t.Fatalf("walkthrough exports %s: the test knows only DQ_ADDR", k)
			}
			env["DQ_ADDR"] = d.api
		case words[0] != "dq":
			t.Fatalf("walkthrough line %q does not run dq", line)
		default:
			ran++
			runWalkthroughLine(t, env, words, comment, &recent)
		}
	}
	if ran < 10 {
		t.Fatalf("ran %d dq commands from the walkthrough; it has fewer than the test expects (did its heading move?)", ran)
	}
}

// readmeWalkthrough is the first sh block under the README's walkthrough
// heading.
func readmeWalkthrough(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### A walkthrough")
	if !ok {
		t.Fatal(`README.md has no "### A walkthrough" heading`)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("README.md: no sh block under the walkthrough heading")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md: the walkthrough's sh block does not end")
	}
	return block
}

var (
	commentState  = regexp.MustCompile(`^(?:state: )?([a-z]+)\b`)
	commentAtt    = regexp.MustCompile(`attempt (\d+) of (\d+)`)
	commentQuoted = regexp.MustCompile(`"([^"]+)"|task_id=(\S+)`)
	listedIDs     = regexp.MustCompile(`\b[a-z]+-\d+\b`)
)

// runWalkthroughLine runs one dq command of the walkthrough and checks
// what its comment promises.
func runWalkthroughLine(t *testing.T, env map[string]string, words []string, comment string, recent *[]string) {
	t.Helper()
	args := words[1:]
	run := func() string {
		out, errOut, err := runDQ(t, env, args...)
		if err != nil {
			t.Fatalf("walkthrough: dq %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	switch {
	case args[0] == "schedule":
		run()
		if i := indexOf(args, "--id"); i >= 0 && i+1 < len(args) {
			*recent = append(*recent, args[i+1])
		}
	case args[0] == "get" && isState(comment):
		want := commentState.FindStringSubmatch(comment)[1]
		var out string
		testenv.WaitFor(t, 45*time.Second, fmt.Sprintf("dq get %s shows %s, as the README says", args[1], want), func() bool {
			out = run()
			return strings.Contains(out, want)
		})
		if m := commentAtt.FindStringSubmatch(comment); len(m) == 3 && !regexp.MustCompile(`\b`+m[1]+`\D+`+m[2]+`\b`).MatchString(out) {
			t.Errorf("dq get %s: the README says attempt %s of %s; output:\n%s", args[1], m[1], m[2], out)
		}
		if _, list, ok := strings.Cut(comment, "its attempts: "); ok {
			for i, outcome := range strings.Split(list, ", ") {
				if !regexp.MustCompile(fmt.Sprintf(`(?m)^attempt %d:\s+%s\b`, i+1, regexp.QuoteMeta(outcome))).MatchString(out) {
					t.Errorf("dq get %s: the README says attempt %d was %s; output:\n%s", args[1], i+1, outcome, out)
				}
			}
		}
		if strings.Contains(comment, "died_at") && !strings.Contains(out, "died") {
			t.Errorf("dq get %s: the README promises its died_at; output:\n%s", args[1], out)
		}
	case len(args) > 1 && args[1] == "list":
		out := run()
		want := listedIDs.FindAllString(comment, -1)
		if strings.HasPrefix(comment, "both") && len(*recent) >= 2 {
			want = (*recent)[len(*recent)-2:]
		}
		for _, id := range want {
			if !strings.Contains(out, id) {
				t.Errorf("dq %s: the README says it lists %s; output:\n%s", strings.Join(args, " "), id, out)
			}
		}
	default:
		run()
	}
}

// waitPrinted waits until every quoted text and task_id=ID of a "dq dev
// prints" comment shows in dq dev's output.
func waitPrinted(t *testing.T, d *devRun, comment string) {
	t.Helper()
	for _, m := range commentQuoted.FindAllStringSubmatch(comment, -1) {
		want := m[1]
		if m[2] != "" {
			want = "task_id=" + m[2]
		}
		testenv.WaitFor(t, 45*time.Second, fmt.Sprintf("dq dev prints %s, as the README says", want), func() bool {
			return strings.Contains(d.out.String()+d.errb.String(), want)
		})
	}
	// an id named without task_id= ("for flaky-1 attempts 1 and 2"): its
	// lines are printed too
	for _, id := range listedIDs.FindAllString(commentQuoted.ReplaceAllString(comment, ""), -1) {
		testenv.WaitFor(t, 45*time.Second, "dq dev prints task_id="+id+", as the README says", func() bool {
			return strings.Contains(d.out.String()+d.errb.String(), "task_id="+id)
		})
	}
}

// isState reports whether a comment starts with a task state's name.
func isState(comment string) bool {
	m := commentState.FindStringSubmatch(comment)
	if m == nil {
		return false
	}
	switch task.State(m[1]) {
	case task.StateScheduled, task.StateSucceeded, task.StateDead, task.StateRetrying, task.StateCancelled, task.StateDelivered, task.StatePaused:
		return true
	}
	return false
}

// splitComment splits a shell line at its comment: a # outside quotes at
// the start or after white space.
func splitComment(line string) (cmd, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return strings.TrimSpace(line), ""
}

// shellWords splits a command the way sh does for the walkthrough's
// lines: words separated by spaces, single and double quotes kept
// together (no escapes, variables or globs: the walkthrough has none, and
// one would fail here).
func shellWords(t *testing.T, cmd string) []string {
	t.Helper()
	if strings.ContainsAny(cmd, "$`\\*?|;&<>") && !strings.HasPrefix(cmd, "export ") {
		t.Fatalf("walkthrough line %q uses shell syntax the test does not run", cmd)
	}
	var words []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range cmd {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("walkthrough line %q: unclosed quote", cmd)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
