package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/testenv"
)

func TestConfigDefaultsAndValidate(t *testing.T) {
	c := DefaultConfig()
	if c.HTTPAddr != ":7070" || c.JournalDir != "./dq-journal" || c.MaxBody != 1<<20 || c.MaxBatch != 1000 ||
		c.RedisTimeout != 2*time.Second || c.APIToken != "" || c.Namespace != "dq" || c.Shards != 16 {
		t.Fatalf("defaults: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"max body":      {func(c *Config) { c.MaxBody = 10 }, "DQ_MAX_BODY"},
		"max batch":     {func(c *Config) { c.MaxBatch = 0 }, "DQ_MAX_BATCH"},
		"redis timeout": {func(c *Config) { c.RedisTimeout = 0 }, "DQ_REDIS_TIMEOUT"},
		"journal dir":   {func(c *Config) { c.JournalDir = " " }, "DQ_JOURNAL_DIR"},
		"token":         {func(c *Config) { c.APIToken = "a b" }, "DQ_API_TOKEN"},
		"http addr":     {func(c *Config) { c.HTTPAddr = "" }, "DQ_HTTP_ADDR"},
		"namespace":     {func(c *Config) { c.Namespace = "a:b" }, "namespace"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, tc.want)
		}
	}
}

// TestRun runs the binary's entry point in-process: environment parsing,
// start, a request, shutdown on cancel.
func TestRun(t *testing.T) {
	r := startRedis(t)
	port := testenv.FreePort(t)
	env := map[string]string{
		"DQ_REDIS_ADDRS": r.Addr, "DQ_HTTP_ADDR": "127.0.0.1:" + itoa(port), "DQ_JOURNAL_DIR": t.TempDir(),
		"DQ_NAMESPACE": uniqueNS(t), "DQ_API_TOKEN": "tok", "DQ_LOG_LEVEL": "error", "DQ_MAX_BATCH": "5",
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, nil, func(k string) string { return env[k] }, &bytes.Buffer{}) }()
	base := "http://127.0.0.1:" + itoa(port)
	testenv.WaitFor(t, 10*time.Second, "daemon listening", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	req, _ := http.NewRequest("POST", base+"/v1/tasks/batch", strings.NewReader(`{"tasks":[{},{},{},{},{},{}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("DQ_MAX_BATCH=5 not applied: %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestRunRejectsBadConfig(t *testing.T) {
	err := Run(t.Context(), []string{"-max-batch", "0"}, func(string) string { return "" }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "max-batch") {
		t.Fatalf("run: %v", err)
	}
	var usage bytes.Buffer
	if err := Run(t.Context(), []string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, config.ErrHelp) ||
		!strings.Contains(usage.String(), "DQ_JOURNAL_DIR") {
		t.Fatalf("help: %v %s", err, usage.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
