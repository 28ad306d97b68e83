//go:build !dqslim

package cli

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// TestSinkFailsOnPurpose: the built-in receiver answers 400 to every
// attempt of a fail.* task, 500 to the first two attempts of a flaky.*
// task and 200 after, 200 to any other type; it logs the failures as
// failures on purpose, with the reason in the body.
func TestSinkFailsOnPurpose(t *testing.T) {
	var logs syncBuffer
	h := SinkHandler(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	for _, tc := range []struct {
		typ     string
		attempt string
		want    int
	}{
		{"fail.x", "1", http.StatusBadRequest},
		{"fail.x", "4", http.StatusBadRequest},
		{"flaky.x", "1", http.StatusInternalServerError},
		{"flaky.x", "2", http.StatusInternalServerError},
		{"flaky.x", "3", http.StatusOK},
		{"flaky.x", "9", http.StatusOK},
		{"flaky.x", "", http.StatusInternalServerError}, // no attempt header: a first attempt
		{"hello", "1", http.StatusOK},
		{"failing", "1", http.StatusOK},  // the prefix is "fail." with its dot
		{"x.fail.y", "1", http.StatusOK}, // a prefix, not a substring
	} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"n":1}`))
		req.Header.Set("Dq-Id", "id-"+tc.typ+"-"+tc.attempt)
		req.Header.Set("Dq-Type", tc.typ)
		if tc.attempt != "" {
			req.Header.Set("Dq-Attempt", tc.attempt)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("type %s attempt %q: answered %d, want %d", tc.typ, tc.attempt, rec.Code, tc.want)
		}
		if tc.want != http.StatusOK && !strings.Contains(rec.Body.String(), "dq dev sink: ") {
			t.Errorf("type %s attempt %q: body %q does not say why", tc.typ, tc.attempt, rec.Body.String())
		}
	}
	if n := strings.Count(logs.String(), `msg="task failed on purpose"`); n != 5 {
		t.Errorf("%d failures on purpose logged, want 5:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `msg="task delivered"`); n != 5 {
		t.Errorf("%d deliveries logged, want 5:\n%s", n, logs.String())
	}
}

// TestDevEnvSettings: dq dev takes the DQ_* settings that apply from its
// environment, its flags win over them, and it notes the ones it sets
// itself.
func TestDevEnvSettings(t *testing.T) {
	env := map[string]string{
		"DQ_API_TOKEN":   "secret",
		"DQ_RETENTION":   "2h",
		"DQ_BACKOFF_MIN": "100ms",
		"DQ_SHARDS":      "3",
		"DQ_WEBHOOK_URL": "http://127.0.0.1:9/hook",
		"DQ_LOG_LEVEL":   "debug",
		"DQ_NAMESPACE":   "theirs",
		"DQ_TOPICS":      "a,b",
		"DQ_ADDR":        "http://elsewhere:7070", // dq's own, not an application's
	}
	getenv := func(k string) string { return env[k] }
	o, err := parseDevArgs(Env{Stderr: io.Discard, Getenv: getenv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.shards != 3 || o.webhook != env["DQ_WEBHOOK_URL"] || o.token != "secret" {
		t.Errorf("shards %d, webhook %q, token %q: want DQ_SHARDS, DQ_WEBHOOK_URL, DQ_API_TOKEN", o.shards, o.webhook, o.token)
	}
	if got, want := strings.Join(o.fromEnv, " "), "DQ_API_TOKEN DQ_BACKOFF_MIN DQ_LOG_LEVEL DQ_RETENTION DQ_SHARDS DQ_WEBHOOK_URL"; got != want {
		t.Errorf("applied %q, want %q", got, want)
	}
	if got := strings.Join(o.ignored, " "); got != "DQ_NAMESPACE DQ_TOPICS" {
		t.Errorf("ignored %q, want DQ_NAMESPACE DQ_TOPICS", got)
	}
	s := &devSystem{redisAddr: "127.0.0.1:1", webhook: o.webhook, topics: devTopics("")}
	app := s.appEnv(o)
	for k, want := range map[string]string{
		"DQ_API_TOKEN": "secret", "DQ_RETENTION": "2h", "DQ_BACKOFF_MIN": "100ms", "DQ_LOG_LEVEL": "debug",
		"DQ_SHARDS": "3", "DQ_WEBHOOK_URL": env["DQ_WEBHOOK_URL"], "DQ_NAMESPACE": "dq", "DQ_TOPICS": "dq.tasks", "DQ_ADDR": "",
	} {
		if app[k] != want {
			t.Errorf("the applications get %s=%q, want %q", k, app[k], want)
		}
	}

	// flags win
	o, err = parseDevArgs(Env{Stderr: io.Discard, Getenv: getenv}, []string{"--shards", "5", "--webhook", "http://127.0.0.1:9/mine", "--verbose"})
	if err != nil {
		t.Fatal(err)
	}
	app = (&devSystem{webhook: o.webhook}).appEnv(o)
	if o.shards != 5 || o.webhook != "http://127.0.0.1:9/mine" || app["DQ_SHARDS"] != "5" || app["DQ_LOG_LEVEL"] != "info" {
		t.Errorf("flags lost to the environment: shards %d, webhook %q, DQ_SHARDS=%s, DQ_LOG_LEVEL=%s", o.shards, o.webhook, app["DQ_SHARDS"], app["DQ_LOG_LEVEL"])
	}
	if strings.Contains(strings.Join(o.fromEnv, " "), "DQ_SHARDS") {
		t.Errorf("DQ_SHARDS listed as applied under --shards: %v", o.fromEnv)
	}

	if _, err := parseDevArgs(Env{Stderr: io.Discard, Getenv: func(k string) string {
		return map[string]string{"DQ_SHARDS": "many"}[k]
	}}, nil); err == nil || !strings.Contains(err.Error(), "DQ_SHARDS") {
		t.Errorf("DQ_SHARDS=many: %v, want an error naming it", err)
	}
}

// TestDevHelpSaysWhatApplies: dq dev -h names the DQ_* variables that
// apply and the types the receiver fails on purpose.
func TestDevHelpSaysWhatApplies(t *testing.T) {
	_, errb, err := runDQ(t, nil, "dev", "-h")
	if !errors.Is(err, ErrHelp) {
		t.Fatalf("dq dev -h: %v", err)
	}
	for _, want := range []string{"DQ_API_TOKEN", "DQ_RETENTION", "DQ_WEBHOOK_URL", "DQ_WORK_CONFIG", "DQ_MAX_BATCH", "DQ_BACKOFF_MIN", "DQ_NAMESPACE", `"fail."`, `"flaky."`, "-webhook"} {
		if !strings.Contains(errb, want) {
			t.Errorf("dq dev -h lacks %s:\n%s", want, errb)
		}
	}
}

// TestDevPortClash: a taken API address is the one error dq dev reports,
// before it starts anything (no cancellation warnings of the other
// applications first).
func TestDevPortClash(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	_, errb, err := runDQ(t, nil, "dev", "--api-addr", ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "--api-addr") {
		t.Fatalf("got %v, want the taken --api-addr", err)
	}
	if errb != "" {
		t.Errorf("dq dev printed before its error:\n%s", errb)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the error took %v: something started first", d)
	}
}

// TestDevLearning is issue 43's "done when" for dq dev: with
// DQ_API_TOKEN set it refuses /v1/* without the token (401) and serves
// it with; a fail.* task ends dead after one attempt, its GET showing
// died_at; a flaky.* task succeeds on attempt 3, within a few seconds
// under dq dev's default backoff.
func TestDevLearning(t *testing.T) {
	env := map[string]string{"DQ_API_TOKEN": "x", "DQ_RETENTION": "1h"}
	o, err := parseDevArgs(Env{Stderr: io.Discard, Getenv: func(k string) string { return env[k] }}, []string{"--shards", "2", "--redis-server", "redis-server"})
	if err != nil {
		t.Fatal(err)
	}
	d := startDevAll(t, o)
	for _, want := range []string{"from the env    DQ_API_TOKEN DQ_RETENTION", "API token       required", "receiver        prints each task; fails fail.*"} {
		if !strings.Contains(d.out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, d.out.String())
		}
	}
	get := func(path, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, d.api+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"x", http.StatusOK}} {
		if code, body := get("/v1/stats", tc.token); code != tc.want {
			t.Errorf("GET /v1/stats with token %q: %d %s, want %d", tc.token, code, body, tc.want)
		}
	}
	if code, _ := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz without a token: %d, want 200 (only /v1/* needs it)", code)
	}

	cl := client.New(d.api, client.WithToken("x"))
	start := time.Now()
	for _, tk := range []client.Task{{ID: "learn-fail", Type: "fail.x"}, {ID: "learn-flaky", Type: "flaky.x"}} {
		if _, err := cl.Schedule(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
	}
	var flakyDone time.Duration
	testenv.WaitFor(t, 30*time.Second, "fail.x dead and flaky.x succeeded", func() bool {
		f, err1 := cl.Get(t.Context(), "learn-fail")
		k, err2 := cl.Get(t.Context(), "learn-flaky")
		if err1 != nil || err2 != nil {
			return false
		}
		if k.State == "succeeded" && flakyDone == 0 {
			flakyDone = time.Since(start)
		}
		return f.State == "dead" && k.State == "succeeded"
	})
	t.Logf("flaky.x succeeded %v after it was scheduled", flakyDone)
	if flakyDone > 10*time.Second {
		t.Errorf("flaky.x took %v to reach attempt 3: dq dev's backoff is too long to learn with", flakyDone)
	}
	for id, want := range map[string]int{"learn-fail": 1, "learn-flaky": 3} {
		ti, err := cl.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if ti.Attempt != want {
			t.Errorf("%s ended %s on attempt %d, want %d", id, ti.State, ti.Attempt, want)
		}
	}
	out := d.out.String()
	for _, want := range []string{
		`msg="task failed on purpose" task_id=learn-fail type=fail.x attempt=1 `,
		`msg="task failed on purpose" task_id=learn-flaky type=flaky.x attempt=1 `,
		`msg="task failed on purpose" task_id=learn-flaky type=flaky.x attempt=2 `,
		`msg="task delivered" task_id=learn-flaky type=flaky.x attempt=3 `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the receiver did not print %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "task_id=learn-fail type=fail.x attempt=2") {
		t.Errorf("fail.x was retried:\n%s", out)
	}

	// GET of the dead task says when it died (the raw JSON: what a curl sees)
	code, body := get("/v1/tasks/learn-fail", "x")
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/tasks/learn-fail: %d %s (%v)", code, body, err)
	}
	died, _ := raw["died_at"].(string)
	if at, err := time.Parse(time.RFC3339Nano, died); err != nil || at.Before(start.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("GET of the dead task: died_at %q, want its time of death: %s", died, body)
	}
	if le, _ := raw["last_error"].(string); !strings.Contains(le, "400") || !strings.Contains(le, SinkFailPrefix) {
		t.Errorf("last_error %q, want the receiver's 400 and why", le)
	}
}
