package client_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/cli/devcert"
)

// tlsDaemon is an https server with a certificate of a private CA that
// answers every request with the API's 404; it returns the CA's pool.
func tlsDaemon(t *testing.T) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	ca, err := devcert.NewCA("daemon CA")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := p.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"task x not found"}}`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, ca.Pool()
}

// TestWithCA: a daemon whose certificate a private CA signed is reached
// with WithCA (alone or with WithHTTPClient, whose timeout stays and
// whose transport is not changed) and refused without it.
func TestWithCA(t *testing.T) {
	srv, pool := tlsDaemon(t)
	var unknown x509.UnknownAuthorityError

	c := client.New(srv.URL, client.WithCA(pool))
	if err := c.Cancel(t.Context(), "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("WithCA: %v, want the daemon's 404", err)
	}
	if err := client.New(srv.URL).Cancel(t.Context(), "x"); !errors.As(err, &unknown) {
		t.Errorf("without WithCA: %v, want an unknown authority error", err)
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	c = client.New(srv.URL, client.WithCA(pool), client.WithHTTPClient(hc)) // in either order
	if err := c.Cancel(t.Context(), "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("WithCA and WithHTTPClient: %v, want the daemon's 404", err)
	}
	if tr.TLSClientConfig != nil && tr.TLSClientConfig.RootCAs != nil {
		t.Errorf("WithCA changed the caller's transport")
	}
	if err := client.New(srv.URL, client.WithHTTPClient(hc)).Cancel(t.Context(), "x"); !errors.As(err, &unknown) {
		t.Errorf("the caller's client itself: %v, want an unknown authority error", err)
	}
}
