package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// TestParseFlagsAndArgsInAnyOrder: "dq get ID -o json" and "dq get -o json
// ID" mean the same; "--" ends the flags.
func TestParseFlagsAndArgsInAnyOrder(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		out  string
	}{
		{[]string{"id1", "-o", "json"}, []string{"id1"}, "json"},
		{[]string{"-o", "json", "id1"}, []string{"id1"}, "json"},
		{[]string{"a", "-o", "json", "b"}, []string{"a", "b"}, "json"},
		{[]string{"--", "-o", "x"}, []string{"-o", "x"}, "text"},
		{[]string{"a", "--", "-b"}, []string{"a", "-b"}, "text"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		out := fs.String("o", "text", "")
		pos, err := parse(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *out != tc.out {
			t.Errorf("parse(%q) = %q, -o %q, %v; want %q, -o %q", tc.args, pos, *out, err, tc.pos, tc.out)
		}
	}
}

// TestMultiCallNames: under the name daemon, event or work dq runs that
// application (its -h output names it); under any other name, dq.
func TestMultiCallNames(t *testing.T) {
	for _, name := range []string{"daemon", "event", "work"} {
		var errb syncBuffer
		err := Main(t.Context(), []string{"/" + name, "-h"}, Env{Stdout: io.Discard, Stderr: &errb, Getenv: func(string) string { return "" }})
		if !errors.Is(err, flag.ErrHelp) || !strings.Contains(errb.String(), "Usage of "+name) {
			t.Errorf("%s -h: %v, output %q", name, err, errb.String())
		}
	}
	var errb syncBuffer
	err := Main(t.Context(), []string{"/usr/local/bin/dq", "nonsense"}, Env{Stdout: io.Discard, Stderr: &errb})
	if err == nil || !strings.Contains(errb.String(), "dq — delayq's command-line tool") {
		t.Errorf("dq nonsense: %v, %q", err, errb.String())
	}
}

// TestHealth: dq health succeeds on 2xx and fails (exit 1) otherwise.
func TestHealth(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "redis down", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if out, _, err := runDQ(t, nil, "health", "--url", ok.URL+"/healthz"); err != nil || !strings.Contains(out, "healthy") {
		t.Errorf("healthy URL: %q, %v", out, err)
	}
	if _, _, err := runDQ(t, nil, "health", "--url", bad.URL); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "redis down") {
		t.Errorf("503: %v, want an error naming the status and body", err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	if _, _, err := runDQ(t, nil, "health", "--url", closed.URL, "--timeout", "500ms"); err == nil {
		t.Errorf("nothing listening: no error")
	}
	if _, _, err := runDQ(t, nil, "health"); err == nil {
		t.Errorf("health without --url or --kafka: no error")
	}
}

// TestAPICommands: schedule, get, reschedule, cancel, stats and dead
// against a real daemon, in text and JSON output, with --addr or DQ_ADDR.
func TestAPICommands(t *testing.T) {
	base, _ := startDaemon(t, nil)
	env := map[string]string{"DQ_ADDR": base}

	out, _, err := runDQ(t, env, "schedule", "order.cancel", "--id", "o-1", "--in", "1h", "--payload", `{"order": 1}`)
	if err != nil || !strings.Contains(out, "o-1 scheduled (created)") || !strings.Contains(out, "(in 59m") && !strings.Contains(out, "(in 1h") {
		t.Fatalf("schedule: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "schedule", "--type", "order.cancel", "--id", "o-1", "--in", "1h", "--payload", `{"order": 1}`, "-o", "json")
	var res client.Result
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.ID != "o-1" || res.Outcome == "created" {
		t.Fatalf("re-schedule -o json: %q, %v", out, err)
	}
	out, _, err = runDQ(t, nil, "get", "o-1", "--addr", strings.TrimPrefix(base, "http://"))
	if err != nil || !strings.Contains(out, "state:") || !strings.Contains(out, "scheduled") || !strings.Contains(out, `{"order": 1}`) {
		t.Fatalf("get: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "get", "-o", "json", "o-1")
	var ti client.TaskInfo
	if err != nil || json.Unmarshal([]byte(out), &ti) != nil || ti.Type != "order.cancel" || ti.State != "scheduled" {
		t.Fatalf("get -o json: %q, %v", out, err)
	}
	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
	out, _, err = runDQ(t, env, "reschedule", "o-1", "--at", at.Format(time.RFC3339Nano))
	if err != nil || !strings.Contains(out, "rescheduled") || !strings.Contains(out, at.Format("2006-01-02T15:04:05.000Z")) {
		t.Fatalf("reschedule --at: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "reschedule", "o-1", "--in", "3h", "-o", "json"); err != nil || !strings.Contains(out, `"due_at"`) {
		t.Fatalf("reschedule --in: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "stats"); err != nil || !strings.Contains(out, "scheduled 1,") {
		t.Fatalf("stats: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "stats", "-o", "json"); err != nil || !strings.Contains(out, `"shard_count"`) {
		t.Fatalf("stats -o json: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "cancel", "o-1"); err != nil || out != "o-1 cancelled\n" {
		t.Fatalf("cancel: %q, %v", out, err)
	}
	if _, _, err = runDQ(t, env, "cancel", "o-1"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("second cancel: %v, want conflict", err)
	}
	if _, _, err = runDQ(t, env, "get", "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get unknown: %v, want not found", err)
	}
	if out, _, err = runDQ(t, env, "dead", "list"); err != nil || out != "no dead tasks\n" {
		t.Fatalf("dead list: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "dead", "list", "-o", "json"); err != nil || !strings.Contains(out, `"dead"`) {
		t.Fatalf("dead list -o json: %q, %v", out, err)
	}
	if _, _, err = runDQ(t, env, "dead", "redrive", "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("dead redrive unknown: %v, want not found", err)
	}
	// Binary payload from stdin-like file, headers, bad input caught
	// before any request.
	if out, _, err = runDQ(t, env, "schedule", "x", "--binary", "--payload", "raw bytes", "--header", "tenant=a", "--id", "b-1"); err != nil || !strings.Contains(out, "b-1 scheduled") {
		t.Fatalf("binary schedule: %q, %v", out, err)
	}
	for _, bad := range [][]string{
		{"schedule"},
		{"schedule", "x", "--payload", "{not json"},
		{"schedule", "x", "--in", "5s", "--at", "2030-01-01T00:00:00Z"},
		{"reschedule", "o-1"},
		{"get"},
		{"get", "a", "b"},
		{"stats", "-o", "yaml"},
		{"dead"},
	} {
		if _, _, err := runDQ(t, env, bad...); err == nil {
			t.Errorf("dq %q: no error", bad)
		}
	}
	// A token is sent when given.
	var auth string
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Write([]byte(`{"namespace":"x","shards":[]}`))
	}))
	defer spy.Close()
	if _, _, err := runDQ(t, map[string]string{"DQ_API_TOKEN": "s3cret"}, "stats", "--addr", spy.URL); err != nil || auth != "Bearer s3cret" {
		t.Errorf("token: %q, %v", auth, err)
	}
}

// TestLimitsCommand: dq limits set/get/list/delete through the daemon's
// limits API (rules in etcd), as a table by default and as the daemon's
// JSON with -o json.
func TestLimitsCommand(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	base, _ := startDaemon(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	out, _, err := runDQ(t, env, "limits", "set", "email.send", "--quota", "100", "--window", "1m", "--concurrency", "5", "--slot-ttl", "30s", "-o", "json")
	if err != nil || !strings.Contains(out, `"window_quota"`) || !strings.Contains(out, "100") {
		t.Fatalf("limits set: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "limits", "get", "email.send", "-o", "json"); err != nil || !strings.Contains(out, `"concurrency"`) {
		t.Fatalf("limits get -o json: %q, %v", out, err)
	}
	// text (the default, or -o text): a table, no JSON
	for _, args := range [][]string{{"limits", "get", "email.send"}, {"limits", "get", "email.send", "-o", "text"}, {"limits"}, {"limits", "list", "-o", "text"}} {
		out, _, err = runDQ(t, env, args...)
		if err != nil || !regexp.MustCompile(`(?m)^TYPE\s+RULES\s+USAGE\n`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^email\.send\s+100 per 1m0s, 5 running\s+window 0/100, running 0/5$`).MatchString(out) || strings.Contains(out, "{") {
			t.Fatalf("dq %s: %q, %v", strings.Join(args, " "), out, err)
		}
	}
	if out, _, err = runDQ(t, env, "limits", "-o", "json"); err != nil || !strings.Contains(out, "email.send") || !strings.Contains(out, `"limits"`) {
		t.Fatalf("limits list -o json: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "limits", "set", "sms.send", `{"token_bucket":{"rate":10,"burst":20}}`, "-o", "json"); err != nil || !strings.Contains(out, `"token_bucket"`) {
		t.Fatalf("limits set JSON: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "limits", "set", "sms.send", `{"token_bucket":{"rate":10,"burst":20}}`); err != nil ||
		!regexp.MustCompile(`(?m)^sms\.send\s+10/s burst 20\s+tokens \d+\.\d$`).MatchString(out) {
		t.Fatalf("limits set JSON, text answer: %q, %v", out, err)
	}
	// --concurrency without --slot-ttl, --rate without --burst: the defaults
	if out, _, err = runDQ(t, env, "limits", "set", "pdf.render", "--concurrency", "2", "--rate", "2.5", "-o", "json"); err != nil ||
		!strings.Contains(out, `"slot_ttl": "5m0s"`) || !strings.Contains(out, `"burst": 3`) {
		t.Fatalf("limits set with defaults: %q, %v", out, err)
	}
	if _, _, err = runDQ(t, env, "limits", "set", "bad", `{"window_quota":{"limit":-1,"window":"1m"}}`); err == nil {
		t.Fatalf("invalid rules accepted")
	}
	if out, _, err = runDQ(t, env, "limits", "delete", "email.send"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("limits delete: %q, %v", out, err)
	}
	if _, _, err = runDQ(t, env, "limits", "get", "email.send"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("limits get after delete: %v, want not found", err)
	}
}

// TestHelpShowsArguments: -h of a command taking arguments starts with
// its usage line, arguments included; dq limits -h lists set's rule
// flags too.
func TestHelpShowsArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "-h"}, []string{"Usage: dq get ID [flags]", "-addr"}},
		{[]string{"schedule", "-h"}, []string{"Usage: dq schedule TYPE [--id ID]", "-payload", "unchanged"}},
		{[]string{"reschedule", "-h"}, []string{"Usage: dq reschedule ID (--in 10m | --at RFC3339)", "-in"}},
		{[]string{"cancel", "-h"}, []string{"Usage: dq cancel ID [flags]"}},
		{[]string{"import", "-h"}, []string{"Usage: dq import FILE.jsonl [flags]", "-batch"}},
		{[]string{"limits", "-h"}, []string{"Usage: dq limits [list] [flags]", "dq limits set TYPE", "Flags of set", "-quota", "-rate", "-concurrency", "-slot-ttl"}},
		{[]string{"limits", "get", "-h"}, []string{"dq limits get TYPE", "-quota"}},
		{[]string{"limits", "set", "-h"}, []string{"dq limits set TYPE", "-quota", "-window"}},
	} {
		_, stderr, err := runDQ(t, nil, tc.args...)
		if !errors.Is(err, ErrHelp) {
			t.Errorf("dq %s: %v, want ErrHelp", strings.Join(tc.args, " "), err)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("dq %s lacks %q:\n%s", strings.Join(tc.args, " "), w, stderr)
			}
		}
	}
}

// TestScheduleSaysWhatWasKept: dq schedule's text answer to a re-submit
// says that the earlier due time stands, or that the task had ended.
func TestScheduleSaysWhatWasKept(t *testing.T) {
	base, _ := startDaemon(t, nil)
	env := map[string]string{"DQ_ADDR": base}
	if out, _, err := runDQ(t, env, "schedule", "x", "--id", "k-1", "--in", "1h"); err != nil || strings.Contains(out, "kept") {
		t.Fatalf("schedule: %q, %v", out, err)
	}
	out, _, err := runDQ(t, env, "schedule", "x", "--id", "k-1", "--in", "3h")
	if err != nil || !strings.Contains(out, "k-1 scheduled (unchanged)") || !strings.Contains(out, "the due time of the earlier submission is kept") {
		t.Fatalf("re-submit with another delay: %q, %v", out, err)
	}
	if _, _, err := runDQ(t, env, "cancel", "k-1"); err != nil {
		t.Fatal(err)
	}
	out, _, err = runDQ(t, env, "schedule", "x", "--id", "k-1", "--in", "1h")
	if err != nil || !strings.Contains(out, "k-1 cancelled (unchanged)") || !strings.Contains(out, "had already ended (cancelled): nothing was scheduled") {
		t.Fatalf("re-submit of a cancelled task: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "schedule", "x", "--id", "k-1", "--in", "1h", "-o", "json")
	var r client.Result
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.Kept != client.KeptState || !r.Ended() {
		t.Fatalf("re-submit of a cancelled task -o json: %q, %v", out, err)
	}
}
