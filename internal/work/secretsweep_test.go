package work

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// logBuffer collects the log lines of every component, for the sweep.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Secrets never leave in errors (issue 40): secrets planted in the
// webhook URL (its password, a ?token= and a ?code= value) and in a hook
// URL (?api_key=, ?code=), both pointing at a closed port, appear in none
// of the places a failing task's error goes: GET /v1/tasks/{id}
// (last_error), GET /v1/dead, the dq.dead record (value and every
// header), the outcome records and every log line of the daemon, the
// event and the work process (debug level, the start-up line included).
func TestSecretsSweep(t *testing.T) {
	e := newEnv(t)
	e.Kafka.CreateTopic(t, record.DefaultOutcomesTopic, 4)
	etcd := testenv.StartEtcd(t)
	logs := &logBuffer{}
	logger := func(name string) *slog.Logger {
		return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("binary", name)
	}
	n := rand.Uint32()
	secrets := map[string]string{ // what -> the planted value
		"webhook password": fmt.Sprintf("PWsecret%d", n),
		"webhook token":    fmt.Sprintf("TOKsecret%d", n),
		"webhook code":     fmt.Sprintf("CODEsecret%d", n),
		"hook api_key":     fmt.Sprintf("KEYsecret%d", n),
		"hook code":        fmt.Sprintf("HCODEsecret%d", n),
	}
	closed := testenv.FreePort(t) // reserved, nothing listens
	webhookURL := fmt.Sprintf("http://alice:%s@127.0.0.1:%d/hook?token=%s&code=%s&team=ops",
		secrets["webhook password"], closed, secrets["webhook token"], secrets["webhook code"])
	hookURL := fmt.Sprintf("http://127.0.0.1:%d/dead?api_key=%s&code=%s", closed, secrets["hook api_key"], secrets["hook code"])

	base := startDaemon(t, e, logger("daemon"), func(c *daemon.Config) { c.EtcdEndpoints, c.KafkaBrokers = nil, e.Kafka.Brokers })
	startEvent(t, e, etcd, logger("event"))

	// the work process as Run builds it, with its start-up line
	vars := e.vars(webhookURL)
	workConfig := filepath.Join(t.TempDir(), "work.json")
	if err := os.WriteFile(workConfig, []byte(`{"hooks": {"*": {"on_failure": "`+hookURL+`", "timeout": "2s"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	vars["DQ_WORK_CONFIG"] = workConfig
	var cfg Config
	b := config.NewBinder("work")
	cfg.Bind(b)
	if err := b.Parse(nil, func(k string) string { return vars[k] }, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Load(); err != nil {
		t.Fatal(err)
	}
	wlog := logger("work")
	wlog.Info("starting", b.LogAttrs()...)
	app, err := New(t.Context(), cfg, wlog)
	if err != nil {
		t.Fatal(err)
	}
	runApp(t, "work", app.Run)

	dead, outcomes := e.Kafka.Collect(t, "dq.dead"), e.Kafka.Collect(t, record.DefaultOutcomesTopic)
	if code := api(t, http.MethodPost, base+"/v1/tasks", map[string]any{"id": "leak-1", "type": "order.charge",
		"payload": map[string]int{"n": 1}, "max_attempts": 2}, nil); code != http.StatusCreated {
		t.Fatalf("schedule: %d", code)
	}
	e.WaitState(t, 30*time.Second, task.StateDead, "leak-1")
	testenv.WaitFor(t, 20*time.Second, "the dead letter and the dead outcome record", func() bool {
		if len(dead.Get("leak-1")) == 0 {
			return false
		}
		for _, r := range outcomes.Get("leak-1") {
			if o, _ := testenv.Header(r, record.HeaderOutcome); o == record.OutcomeDead {
				return true
			}
		}
		return false
	})
	testenv.WaitFor(t, 20*time.Second, "the on_failure hook tried once", func() bool {
		resp, err := httpGet("http://" + app.Addr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `delayq_hook_calls_total{hook="on_failure",result="retry"} 1`) ||
			strings.Contains(string(body), `delayq_hook_calls_total{hook="on_failure",result="failed"} 1`)
	})

	get := func(path string) string {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	records := func(rs []*kgo.Record) string {
		var sb strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&sb, "key=%s value=%s\n", r.Key, r.Value)
			for _, h := range r.Headers {
				fmt.Fprintf(&sb, "  %s=%s\n", h.Key, h.Value)
			}
		}
		return sb.String()
	}
	sinks := map[string]string{
		"GET /v1/tasks/leak-1": get("/v1/tasks/leak-1"),
		"GET /v1/dead":         get("/v1/dead"),
		"dq.dead records":      records(dead.All()),
		"outcome records":      records(outcomes.All()),
		"logs":                 logs.String(),
	}
	// The sweep looks where the error went: each sink holds it, redacted.
	for name, s := range sinks {
		if name != "logs" && !strings.Contains(s, "webhook http://alice:xxxxx@127.0.0.1:") {
			t.Errorf("%s does not hold the webhook's error:\n%s", name, s)
		}
	}
	if l := sinks["logs"]; !strings.Contains(l, "hook failed") || !strings.Contains(l, "api_key=xxxxx") {
		t.Errorf("the logs do not hold the hook's failure")
	}
	for name, s := range sinks {
		for what, secret := range secrets {
			if i := strings.Index(s, secret); i >= 0 {
				t.Errorf("%s: the %s is in it: …%s…", name, what, s[max(i-200, 0):min(i+len(secret)+50, len(s))])
			}
		}
	}
}
