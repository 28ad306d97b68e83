package work

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/worker"
)

// mtlsSink is an https webhook receiver with a certificate of its own CA
// that accepts only clients with a certificate of that CA. It returns the
// server and the files of a client certificate (with the CA).
func mtlsSink(t *testing.T) (*httptest.Server, devcert.Files) {
	t.Helper()
	ca, err := devcert.NewCA("webhook CA")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ca.Client("delayq-work")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.Write(t.TempDir(), "client", cp)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "delayq-work" {
			t.Errorf("request without the client certificate")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{sc}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, files
}

// TestWebhookTLS: a webhook behind a private CA that requires client
// certificates succeeds with the CA, certificate and key configured; it
// fails with a retried error without the client certificate and with a
// certificate verification error without the CA.
func TestWebhookTLS(t *testing.T) {
	srv, files := mtlsSink(t)
	tk := &worker.Task{ID: "a", Type: "t", Attempt: 1, MaxAttempts: 3, ContentType: "application/json"}
	for _, c := range []struct {
		name     string
		tls      config.TLSFiles
		contains string // "": success
		unknown  bool   // the error is an unknown authority
	}{
		{"CA and client certificate", config.TLSFiles{CA: files.CA, Cert: files.Cert, Key: files.Key}, "", false},
		{"CA without client certificate", config.TLSFiles{CA: files.CA}, "certificate required", false},
		{"client certificate without CA", config.TLSFiles{Cert: files.Cert, Key: files.Key}, "certificate", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc, err := WebhookTLS(c.tls)
			if err != nil {
				t.Fatal(err)
			}
			client := NewHTTPClient(2, tc)
			defer client.CloseIdleConnections()
			h, err := NewWebhook(srv.URL+"/hook", 0, nil, client)
			if err != nil {
				t.Fatal(err)
			}
			err = h.Handle(t.Context(), tk)
			if c.contains == "" {
				if err != nil {
					t.Fatalf("webhook: %v", err)
				}
				return
			}
			if err == nil || worker.IsPermanent(err) || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("webhook: %v (permanent %v), want a retried error containing %q", err, worker.IsPermanent(err), c.contains)
			}
			var ua x509.UnknownAuthorityError
			if c.unknown != errors.As(err, &ua) {
				t.Errorf("webhook: %v: unknown authority %v, want %v", err, !c.unknown, c.unknown)
			}
		})
	}
}

// TestWebhookTLSKeepsSystemRoots: the private CA is added to the
// system's roots, not put in their place.
func TestWebhookTLSKeepsSystemRoots(t *testing.T) {
	sys, err := x509.SystemCertPool()
	if err != nil || sys == nil {
		t.Skipf("no system root pool here: %v", err)
	}
	_, files := mtlsSink(t)
	tc, err := WebhookTLS(config.TLSFiles{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := config.LoadCA(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	sys.AppendCertsFromPEM(mustRead(t, files.CA))
	if !tc.RootCAs.Equal(sys) || tc.RootCAs.Equal(ca) {
		t.Errorf("RootCAs is not the system pool plus the CA")
	}
	if tc, err := WebhookTLS(config.TLSFiles{}); tc != nil || err != nil {
		t.Errorf("nothing set: %v, %v; want nil, nil", tc, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConfigWebhookTLS: the webhook TLS settings are bound to
// DQ_WEBHOOK_TLS_* and --webhook-tls-*, and a missing file or a key that
// is not the certificate's stops the start with the variable named.
func TestConfigWebhookTLS(t *testing.T) {
	_, files := mtlsSink(t)
	env := map[string]string{"DQ_WEBHOOK_URL": "https://sink/x", "DQ_WEBHOOK_TLS_CA": files.CA,
		"DQ_WEBHOOK_TLS_CERT": files.Cert, "DQ_WEBHOOK_TLS_KEY": files.Key}
	c, err := parse(t, nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.WebhookTLS.CA != files.CA || c.WebhookTLS.Cert != files.Cert || c.WebhookTLS.Key != files.Key {
		t.Errorf("from env: %+v", c.WebhookTLS)
	}
	if c, err = parse(t, []string{"--webhook-tls-ca", files.Cert}, env); err != nil || c.WebhookTLS.CA != files.Cert {
		t.Errorf("--webhook-tls-ca: %+v, %v", c.WebhookTLS, err)
	}

	other, err := devcert.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	op, err := other.Client("x")
	if err != nil {
		t.Fatal(err)
	}
	of, err := other.Write(t.TempDir(), "other", op)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope.crt")
	for _, c := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"DQ_WEBHOOK_TLS_CA": missing}, "DQ_WEBHOOK_TLS_CA"},
		{map[string]string{"DQ_WEBHOOK_TLS_KEY": of.Key}, "DQ_WEBHOOK_TLS_KEY"},
		{map[string]string{"DQ_WEBHOOK_TLS_CERT": missing}, "DQ_WEBHOOK_TLS_CERT"},
		{map[string]string{"DQ_WEBHOOK_TLS_KEY": ""}, "DQ_WEBHOOK_TLS_CERT"}, // a certificate without its key
	} {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for k, v := range c.set {
			e[k] = v
		}
		if _, err := parse(t, nil, e); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.set, err, c.want)
		}
	}
}
