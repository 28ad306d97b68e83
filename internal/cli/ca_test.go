package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/testenv"
)

// privateCA makes a CA and a server certificate for 127.0.0.1 in a
// temporary directory.
func privateCA(t *testing.T) (*devcert.CA, devcert.Pair, devcert.Files) {
	t.Helper()
	ca, err := devcert.NewCA("dq test CA")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Write(t.TempDir(), "server", p)
	if err != nil {
		t.Fatal(err)
	}
	return ca, p, f
}

// TestCAFlag: an API command reaches an https daemon whose certificate a
// private CA signed with --ca (or DQ_CA), is refused without it, and a
// CA file that is missing or not PEM is an error naming --ca.
func TestCAFlag(t *testing.T) {
	_, pair, files := privateCA(t)
	cert, err := pair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/stats":
			io.WriteString(w, `{"namespace":"tls","shards":[]}`)
		case "/v1/limits":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"limits":{"tls.type":{"concurrency":{"limit":3}}}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	if out, _, err := runDQ(t, nil, "stats", "--addr", srv.URL, "--ca", files.CA, "-o", "json"); err != nil || !strings.Contains(out, `"tls"`) {
		t.Errorf("--ca: %q, %v", out, err)
	}
	if out, _, err := runDQ(t, map[string]string{"DQ_CA": files.CA, "DQ_ADDR": srv.URL}, "stats", "-o", "json"); err != nil || !strings.Contains(out, `"tls"`) {
		t.Errorf("DQ_CA: %q, %v", out, err)
	}
	// limits (and import) build their own requests: they trust --ca too
	if out, _, err := runDQ(t, nil, "limits", "--addr", srv.URL, "--ca", files.CA, "-o", "json"); err != nil || !strings.Contains(out, "tls.type") {
		t.Errorf("limits --ca: %q, %v", out, err)
	}
	if _, _, err := runDQ(t, nil, "limits", "--addr", srv.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("limits without --ca: %v, want a certificate error", err)
	}
	if _, _, err := runDQ(t, nil, "stats", "--addr", srv.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without --ca: %v, want a certificate error", err)
	}
	// the healthcheck of an https port trusts --ca too
	if out, _, err := runDQ(t, nil, "health", "--url", srv.URL+"/v1/stats", "--ca", files.CA); err != nil || !strings.Contains(out, "healthy") {
		t.Errorf("health --ca: %q, %v", out, err)
	}
	if _, _, err := runDQ(t, nil, "health", "--url", srv.URL+"/v1/stats"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("health without --ca: %v, want a certificate error", err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ca := range []string{filepath.Join(t.TempDir(), "missing.crt"), notPEM} {
		if _, _, err := runDQ(t, nil, "stats", "--addr", srv.URL, "--ca", ca); err == nil || !strings.Contains(err.Error(), "--ca (DQ_CA)") || !strings.Contains(err.Error(), ca) {
			t.Errorf("--ca %s: %v, want an error naming --ca and the file", ca, err)
		}
		if _, _, err := runDQ(t, nil, "health", "--url", srv.URL, "--ca", ca); err == nil || !strings.Contains(err.Error(), "--ca (DQ_CA)") || !strings.Contains(err.Error(), ca) {
			t.Errorf("health --ca %s: %v, want an error naming --ca and the file", ca, err)
		}
	}
}

// TestCAFlagWithHTTPSDaemon: a daemon serving HTTPS (DQ_HTTP_TLS_CERT,
// DQ_HTTP_TLS_KEY) schedules and reads back a task for dq --ca.
func TestCAFlagWithHTTPSDaemon(t *testing.T) {
	_, _, files := privateCA(t)
	r := testenv.StartRedis(t)
	cfg := daemon.DefaultConfig()
	cfg.Namespace = fmt.Sprintf("cli%d", nsSeq.Add(1))
	cfg.RedisAddrs = []string{r.Addr}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.HTTPTLS = config.ServerFiles{Cert: files.Cert, Key: files.Key}
	cfg.JournalDir = t.TempDir()
	cfg.ShutdownGrace = 5 * time.Second
	app, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})

	env := map[string]string{"DQ_ADDR": "https://" + app.Addr(), "DQ_CA": files.CA}
	if out, _, err := runDQ(t, env, "schedule", "order.cancel", "--id", "tls-1", "--in", "1h"); err != nil || !strings.Contains(out, "tls-1") {
		t.Fatalf("schedule over https: %q, %v", out, err)
	}
	if out, _, err := runDQ(t, env, "get", "tls-1"); err != nil || !strings.Contains(out, "scheduled") {
		t.Errorf("get over https: %q, %v", out, err)
	}
	if _, _, err := runDQ(t, map[string]string{"DQ_ADDR": "http://" + app.Addr()}, "get", "tls-1"); err == nil {
		t.Errorf("plain http to an https daemon: no error")
	}
}
