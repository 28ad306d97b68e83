package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
)

// testPoll is the certificate watch interval of the tests.
const testPoll = 20 * time.Millisecond

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tlsEnv is a directory of certificates from two CAs and a pool trusting
// both, so that a handshake tells which one the server presents.
type tlsEnv struct {
	dir      string
	ca1, ca2 *devcert.CA
	pool     *x509.CertPool
}

func newTLSEnv(t testing.TB) *tlsEnv {
	t.Helper()
	e := &tlsEnv{dir: t.TempDir(), pool: x509.NewCertPool()}
	var err error
	if e.ca1, err = devcert.NewCA("first CA"); err != nil {
		t.Fatal(err)
	}
	if e.ca2, err = devcert.NewCA("second CA"); err != nil {
		t.Fatal(err)
	}
	e.pool.AddCert(e.ca1.Cert)
	e.pool.AddCert(e.ca2.Cert)
	return e
}

// write makes a server certificate signed by ca, writes it over the
// server's files and returns its serial number.
func (e *tlsEnv) write(t testing.TB, ca *devcert.CA) *big.Int {
	t.Helper()
	p, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Write(e.dir, "server", p); err != nil {
		t.Fatal(err)
	}
	c, err := p.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber
}

// files are the server's settings as the binaries bind them (so that
// errors name DQ_HTTP_TLS_CERT and DQ_HTTP_TLS_KEY).
func (e *tlsEnv) files(t testing.TB) config.ServerFiles {
	t.Helper()
	var f config.ServerFiles
	b := config.NewBinder("test")
	b.ServerTLS(&f, "http", "DQ_HTTP", "the HTTP port")
	env := map[string]string{"DQ_HTTP_TLS_CERT": filepath.Join(e.dir, "server.crt"), "DQ_HTTP_TLS_KEY": filepath.Join(e.dir, "server.key")}
	if err := b.Parse(nil, func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Fatal(err)
	}
	return f
}

// serve runs an HTTPS server until the test ends and checks that Run
// returned without an error.
func serve(t *testing.T, f config.ServerFiles, log *syncBuffer, opts ...Option) *Server {
	t.Helper()
	l := slog.New(slog.NewTextHandler(log, nil))
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	s, err := Listen("127.0.0.1:0", h, l, 5*time.Second, append([]Option{WithTLS(f)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// peerSerial makes a new handshake and returns the serial number of the
// certificate the server presented.
func peerSerial(t testing.TB, addr string, pool *x509.CertPool) (*big.Int, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// eventually polls cond for up to 5 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// servesSerial waits until new handshakes see the certificate want.
func servesSerial(t testing.TB, addr string, pool *x509.CertPool, want *big.Int) {
	t.Helper()
	var got *big.Int
	var err error
	eventually(t, "new handshakes see serial "+want.String(), func() bool {
		got, err = peerSerial(t, addr, pool)
		return err == nil && got.Cmp(want) == 0
	})
}

// TestHTTPSReloadsChangedFiles: the server speaks HTTPS (not below TLS
// 1.2) with the first certificate; files replaced by a certificate of
// another CA are served to new handshakes within a few polls, and the
// reload is logged.
func TestHTTPSReloadsChangedFiles(t *testing.T) {
	e := newTLSEnv(t)
	first := e.write(t, e.ca1)
	var log syncBuffer
	s := serve(t, e.files(t), &log, withCertPoll(testPoll))

	if got, err := peerSerial(t, s.Addr(), e.pool); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("first handshake: serial %v, %v; want %v", got, err, first)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca1.Pool()}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + s.Addr() + "/")
	if err != nil {
		t.Fatalf("https GET: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("https GET: %q", body)
	}
	if _, err := tls.Dial("tcp", s.Addr(), &tls.Config{RootCAs: e.pool, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Errorf("a TLS 1.1 handshake succeeded")
	}

	second := e.write(t, e.ca2)
	servesSerial(t, s.Addr(), e.pool, second)
	if !strings.Contains(log.String(), "certificate reloaded") {
		t.Errorf("no reload logged:\n%s", log.String())
	}
}

// TestHTTPSReloadsOnSIGHUP: with a watch interval far beyond the test, a
// SIGHUP alone makes new handshakes see the new certificate.
func TestHTTPSReloadsOnSIGHUP(t *testing.T) {
	// The test's own handler: a SIGHUP never ends the test process, even
	// if the server failed to install its own.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	e := newTLSEnv(t)
	first := e.write(t, e.ca1)
	var log syncBuffer
	s := serve(t, e.files(t), &log, withCertPoll(time.Hour))
	servesSerial(t, s.Addr(), e.pool, first) // Run installed its handler before serving

	second := e.write(t, e.ca2)
	if got, err := peerSerial(t, s.Addr(), e.pool); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("before SIGHUP: serial %v, %v; want the first %v", got, err, first)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	servesSerial(t, s.Addr(), e.pool, second)
	if !strings.Contains(log.String(), "reason=SIGHUP") {
		t.Errorf("reload not logged with its reason:\n%s", log.String())
	}
}

// TestHTTPSKeepsCertWhenReloadFails: a certificate file that is not PEM
// is logged once (naming the variable) and the previous certificate is
// still served; fixing the file reloads.
func TestHTTPSKeepsCertWhenReloadFails(t *testing.T) {
	e := newTLSEnv(t)
	first := e.write(t, e.ca1)
	var log syncBuffer
	s := serve(t, e.files(t), &log, withCertPoll(testPoll))
	servesSerial(t, s.Addr(), e.pool, first)

	// Written aside and renamed: one change of the files, as a rotation
	// tool makes it (os.WriteFile truncates first, and a poll between the
	// truncation and the write that stalls past two polls is a second
	// change, rightly warned about again).
	tmp := filepath.Join(e.dir, "server.crt.new")
	if err := os.WriteFile(tmp, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, "server.crt")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a WARN naming DQ_HTTP_TLS_CERT", func() bool {
		return strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "DQ_HTTP_TLS_CERT")
	})
	if got, err := peerSerial(t, s.Addr(), e.pool); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("after a failed reload: serial %v, %v; want the first %v", got, err, first)
	}
	// An observation window of several polls: the unchanged broken file
	// is not retried (and warned about) at every poll.
	time.Sleep(10 * testPoll)
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for one broken file, want 1:\n%s", n, log.String())
	}

	second := e.write(t, e.ca2)
	servesSerial(t, s.Addr(), e.pool, second)
}

// TestCertsWaitForTheFilesToSettle: a change is loaded once the files
// look the same at two polls in a row, so that a half-written file or a
// new certificate beside the old key is never tried (and warned about).
func TestCertsWaitForTheFilesToSettle(t *testing.T) {
	e := newTLSEnv(t)
	first := e.write(t, e.ca1)
	var log syncBuffer
	c, err := newCerts(e.files(t), slog.New(slog.NewTextHandler(&log, nil)), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() *big.Int { return c.cur.Load().Leaf.SerialNumber }
	crt, key := filepath.Join(e.dir, "server.crt"), filepath.Join(e.dir, "server.key")

	c.check() // nothing changed
	pem, err := os.ReadFile(crt)
	if err != nil {
		t.Fatal(err)
	}
	// Half of a certificate: seen once, not loaded.
	if err := os.WriteFile(crt, pem[:len(pem)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	c.check()
	// The new pair's certificate beside the old key: changed again, not loaded.
	second := e.write(t, e.ca2)
	keyPEM, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	newCrt, err := os.ReadFile(crt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("stale key of another size\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.check()
	if got := serial(); got.Cmp(first) != 0 || log.String() != "" {
		t.Fatalf("while the files change: serial %v (want the first %v), log:\n%s", got, first, log.String())
	}
	// The key arrives; the next poll sees a change, the one after loads it.
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crt, newCrt, 0o644); err != nil {
		t.Fatal(err)
	}
	c.check()
	if got := serial(); got.Cmp(first) != 0 {
		t.Fatalf("after one poll of the new pair: serial %v, want the first %v", got, first)
	}
	c.check()
	if got := serial(); got.Cmp(second) != 0 {
		t.Fatalf("after two polls of the new pair: serial %v, want the second %v", got, second)
	}
	if strings.Contains(log.String(), "level=WARN") || strings.Count(log.String(), "certificate reloaded") != 1 {
		t.Errorf("want one reload and no warning:\n%s", log.String())
	}
	c.check() // settled: no second reload
	if n := strings.Count(log.String(), "certificate reloaded"); n != 1 {
		t.Errorf("%d reloads of one change, want 1:\n%s", n, log.String())
	}
}

// TestListenTLSNamesTheVariable: a server does not start without its
// certificate, and the error names the variable at fault.
func TestListenTLSNamesTheVariable(t *testing.T) {
	// No files configured: WithTLS does nothing (the binaries pass it always).
	s, err := Listen("127.0.0.1:0", http.NotFoundHandler(), slog.New(slog.DiscardHandler), time.Second, WithTLS(config.ServerFiles{}))
	if err != nil || s.certs != nil || s.srv.TLSConfig != nil {
		t.Fatalf("WithTLS without files: %v, want plain HTTP", err)
	}
	s.ln.Close()

	e := newTLSEnv(t)
	f := e.files(t) // nothing written yet
	_, err = Listen("127.0.0.1:0", http.NotFoundHandler(), slog.New(slog.DiscardHandler), time.Second, WithTLS(f))
	if err == nil || !strings.Contains(err.Error(), "DQ_HTTP_TLS_CERT") {
		t.Fatalf("missing certificate: %v, want an error naming DQ_HTTP_TLS_CERT", err)
	}
	e.write(t, e.ca1)
	if err := os.WriteFile(filepath.Join(e.dir, "server.key"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Listen("127.0.0.1:0", http.NotFoundHandler(), slog.New(slog.DiscardHandler), time.Second, WithTLS(f))
	if err == nil || !strings.Contains(err.Error(), "DQ_HTTP_TLS_KEY") {
		t.Fatalf("broken key: %v, want an error naming DQ_HTTP_TLS_KEY", err)
	}
}
