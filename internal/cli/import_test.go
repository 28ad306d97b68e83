package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
)

// badLines are the lines of the test file that must be rejected, with the
// error code each gets.
var badLines = map[int64]string{
	17:    "invalid_json", // not JSON
	4242:  "",             // no type: the daemon refuses it
	50000: "invalid_json", // JSON, but not an object
	77777: "",             // negative delay
	99999: "",             // unparsable due_at
}

// writeImportFile writes n task lines: even lines with an id, odd lines
// without (dq import gives them one), the bad lines above, and line 123
// blank.
func writeImportFile(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := int64(1); i <= int64(n); i++ {
		switch {
		case i == 17:
			fmt.Fprintln(w, `{not json`)
		case i == 123:
			fmt.Fprintln(w)
		case i == 4242:
			fmt.Fprintln(w, `{"payload":{"i":4242},"delay":"1h"}`)
		case i == 50000:
			fmt.Fprintln(w, `[1,2,3]`)
		case i == 77777:
			fmt.Fprintln(w, `{"type":"imp","delay":"-5s"}`)
		case i == 99999:
			fmt.Fprintln(w, `{"type":"imp","due_at":"yesterday"}`)
		case i%2 == 0:
			fmt.Fprintf(w, `{"id":"imp-explicit-%d","type":"imp","payload":{"i":%d},"delay":"1h"}`+"\n", i, i)
		default:
			fmt.Fprintf(w, `{"type":"imp","payload":{"i":%d},"delay":"1h"}`+"\n", i)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImport100k: 100,000 lines, interrupted after 40 batches by a daemon
// that starts failing, resumed from the .progress file: the summary counts
// every line once, names the bad lines by number, and the daemon holds
// exactly the accepted tasks (no duplicates from the resumed batch).
func TestImport100k(t *testing.T) {
	const n = 100000
	base, _ := startDaemon(t, nil)
	path := writeImportFile(t, n)

	// A proxy that fails every batch request after the 40th.
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var batches atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/tasks/batch" && batches.Add(1) > 40 {
			http.Error(w, `{"error":{"code":"unavailable","message":"going away"}}`, http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer flaky.Close()

	_, stderr, err := runDQ(t, nil, "import", path, "--addr", flaky.URL, "--retries", "1")
	if err == nil || !strings.Contains(err.Error(), "run the same command again to resume") {
		t.Fatalf("interrupted import: %v, want an error saying how to resume", err)
	}
	if _, err := os.Stat(path + ".progress"); err != nil {
		t.Fatalf("no progress file after the interruption: %v", err)
	}
	if !strings.Contains(stderr, "retrying") {
		t.Errorf("stderr does not report the retry: %q", stderr)
	}

	out, stderr, err := runDQ(t, map[string]string{"DQ_ADDR": base}, "import", path, "-o", "json")
	var rej *RejectedLinesError
	if !errors.As(err, &rej) || rej.Rejected != int64(len(badLines)) {
		t.Fatalf("resumed import: %v, want a RejectedLinesError for %d lines\n%s", err, len(badLines), stderr)
	}
	if !strings.Contains(stderr, "resuming") || !strings.Contains(stderr, "100%") {
		t.Errorf("stderr lacks the resume note or the finished progress bar: %q", lastLines(stderr, 3))
	}
	var sum importSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	accepted := int64(n - len(badLines) - 1)
	if sum.Lines != n || sum.Blank != 1 || sum.Rejected != int64(len(badLines)) || sum.Accepted != accepted || !sum.Resumed {
		t.Errorf("summary %+v; want %d lines, 1 blank, %d rejected, %d accepted, resumed", sum, n, len(badLines), accepted)
	}
	if sum.Created+sum.Unchanged != accepted || sum.Created < accepted-1000 {
		t.Errorf("created %d + unchanged %d, want %d in all, nearly all created", sum.Created, sum.Unchanged, accepted)
	}
	var got []int64
	for _, b := range sum.Bad {
		got = append(got, b.Line)
		if want := badLines[b.Line]; want != "" && b.Code != want {
			t.Errorf("line %d rejected with %q, want %q", b.Line, b.Code, want)
		}
		if b.Reason == "" {
			t.Errorf("line %d rejected without a reason", b.Line)
		}
	}
	if want := []int64{17, 4242, 50000, 77777, 99999}; !slices.Equal(got, want) {
		t.Errorf("rejected lines %v, want %v", got, want)
	}
	if _, err := os.Stat(path + ".progress"); !os.IsNotExist(err) {
		t.Errorf("progress file left after a complete import: %v", err)
	}
	stats, err := client.New(base).Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if stats.Totals.Scheduled != accepted {
		t.Errorf("daemon holds %d scheduled tasks, want exactly the %d accepted", stats.Totals.Scheduled, accepted)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestImportText: the text summary lists bad lines by number; importing the
// same file again changes nothing (ids, given or derived from the file,
// make it idempotent); a file whose imported part changed is not resumed.
func TestImportText(t *testing.T) {
	base, _ := startDaemon(t, nil)
	env := map[string]string{"DQ_ADDR": base}
	path := filepath.Join(t.TempDir(), "small.jsonl")
	lines := "{\"type\":\"a\",\"delay\":\"1h\"}\n{oops\n\n{\"type\":\"a\",\"payload\":[1],\"delay\":\"1h\"}\n{\"type\":\"\"}\n{\"type\":\"a\",\"delay\":\"1h\"}" // no final newline
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runDQ(t, env, "import", path, "--batch", "2")
	// lines were rejected: the import went through but dq exits 2
	if code := config.ExitCode(t.Context(), "dq", err, io.Discard); code != 2 || err.Error() != "import: 2 of 5 lines rejected (see the summary); fix them and import the file again" {
		t.Fatalf("import with rejected lines: %v (exit %d), want exit 2", err, code)
	}
	for _, want := range []string{"6 lines, 3 accepted (3 created, 0 unchanged", "2 rejected, 1 blank", "line 2: invalid_json:", "line 5: "} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runDQ(t, env, "import", path)
	if !errors.As(err, new(*RejectedLinesError)) || !strings.Contains(out, "3 accepted (0 created, 3 unchanged") {
		t.Errorf("second import: %v\n%s", err, out)
	}

	// A progress file whose prefix no longer matches the file.
	p := importProgress{Version: 1, Offset: 10, Line: 1, PrefixSHA256: strings.Repeat("0", 64)}
	if err := saveProgress(path+".progress", p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runDQ(t, env, "import", path); err == nil || !strings.Contains(err.Error(), "--restart") {
		t.Errorf("changed file resumed: %v", err)
	}
	if out, _, err := runDQ(t, env, "import", path, "--restart"); !errors.As(err, new(*RejectedLinesError)) || !strings.Contains(out, "3 accepted") {
		t.Errorf("--restart: %v\n%s", err, out)
	}
	if _, _, err := runDQ(t, env, "import", filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Errorf("missing file: no error")
	}
}

// TestImportRejectedInOrder: the summary lists rejected lines by line
// number, whether the daemon refused them (per batch, after the read) or
// dq did while reading; text and JSON alike.
func TestImportRejectedInOrder(t *testing.T) {
	base, _ := startDaemon(t, nil)
	env := map[string]string{"DQ_ADDR": base}
	path := filepath.Join(t.TempDir(), "order.jsonl")
	// line 1 and 3: refused by the daemon when the batch goes; 2 and 4:
	// refused while reading, before the batch is sent
	lines := "{\"type\":\"\"}\n{oops\n{\"type\":\"a\",\"delay\":\"-1s\"}\n[1]\n{\"type\":\"a\",\"delay\":\"1h\"}\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runDQ(t, env, "import", path, "--batch", "10", "-o", "json")
	if !errors.As(err, new(*RejectedLinesError)) {
		t.Fatalf("import: %v\n%s", err, out)
	}
	var sum importSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	var got []int64
	for _, b := range sum.Bad {
		got = append(got, b.Line)
	}
	if want := []int64{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("rejected lines %v, want %v", got, want)
	}
	out, _, _ = runDQ(t, env, "import", path, "--batch", "10", "--restart")
	i1, i2, i3, i4 := strings.Index(out, "line 1:"), strings.Index(out, "line 2:"), strings.Index(out, "line 3:"), strings.Index(out, "line 4:")
	if i1 < 0 || i1 > i2 || i2 > i3 || i3 > i4 {
		t.Fatalf("text summary not by line:\n%s", out)
	}
}
