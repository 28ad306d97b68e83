// Package admin serves what every delayq binary exposes for operators:
// /healthz (the process runs), /readyz (it can do its job), /metrics
// (Prometheus), and runs an HTTP server with a graceful shutdown, on
// HTTPS with a certificate reloaded without a restart (WithTLS).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/delayq/delayq/internal/config"
)

// Namespace prefixes every delayq metric (config.MetricsNamespace: one
// definition, which config's own Redis metrics use too).
const Namespace = config.MetricsNamespace

// NewRegistry is a non-global registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ReadyFunc says whether the process can do its job; a non-nil error is
// shown by /readyz with status 503.
type ReadyFunc func(ctx context.Context) error

// Mount adds /healthz, /readyz and /metrics to mux.
func Mount(mux *http.ServeMux, reg *prometheus.Registry, ready ReadyFunc) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	// OpenMetrics when the scraper asks for it (Prometheus does): the
	// worker's lag and duration histograms carry exemplars naming the
	// trace of a sampled attempt (docs/tracing.md), which only that
	// format shows; plain text otherwise
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Server is an HTTP server that stops gracefully when its context ends.
type Server struct {
	ln      net.Listener
	srv     *http.Server
	log     *slog.Logger
	timeout time.Duration
	certs   *certs // nil: plain HTTP

	mu    sync.Mutex
	fresh map[net.Conn]time.Time // connections with no request yet (StateNew), since when
}

// Option configures a Server.
type Option func(*options)

type options struct {
	tls      *config.ServerFiles
	certPoll time.Duration
}

// WithTLS serves HTTPS (TLS 1.2 or later) with the certificate and key of
// f. Listen loads them (an error names the variable at fault); Run
// reloads them on SIGHUP and when either file changes, and keeps serving
// the previous certificate when a reload fails. When f names no file
// (f.On() is false) it does nothing: the server speaks plain HTTP.
func WithTLS(f config.ServerFiles) Option {
	return func(o *options) {
		if f.On() {
			o.tls = &f
		}
	}
}

// withCertPoll sets how often the certificate files are looked at (tests).
func withCertPoll(d time.Duration) Option {
	return func(o *options) { o.certPoll = d }
}

// Listen binds addr now, so that the caller knows the port (":0" in tests)
// before Run.
func Listen(addr string, h http.Handler, log *slog.Logger, shutdownTimeout time.Duration, opts ...Option) (*Server, error) {
	o := options{certPoll: defaultCertPoll}
	for _, opt := range opts {
		opt(&o)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			// net/http's own messages (a refused TLS handshake) as
			// structured log lines, not plain text on stderr
			ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn)},
		log:     log,
		timeout: shutdownTimeout,
		fresh:   map[net.Conn]time.Time{},
	}
	s.srv.ConnState = s.track
	if o.tls != nil {
		c, err := newCerts(*o.tls, log, o.certPoll)
		if err != nil {
			return nil, fmt.Errorf("http tls: %w", err)
		}
		s.certs = c
		s.srv.TLSConfig = c.tlsConfig()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then finishes in-flight requests within the
// shutdown timeout.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	if s.certs != nil {
		wctx, stop := context.WithCancel(ctx)
		wait := s.certs.start(wctx)
		defer func() { stop(); wait() }()
		go func() { errc <- s.srv.ServeTLS(s.ln, "", "") }()
		s.log.Info("http listening", "addr", s.Addr(), "tls", true, "cert", s.certs.files.Cert)
	} else {
		go func() { errc <- s.srv.Serve(s.ln) }()
		s.log.Info("http listening", "addr", s.Addr())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.srv.Shutdown(sctx) }()
	tick := time.NewTicker(freshCheck)
	defer tick.Stop()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-tick.C:
			s.closeFresh(freshGrace)
		}
	}
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// Shutdown waits for connections that have not sent a request yet
// (StateNew) until they are 5 s old (golang/go#21204, #59037): a client
// such as Go's Transport dials a spare connection when every one is busy
// and parks it unused once another frees up. So a shutdown with a timeout
// of 5 s or less failed, and any longer one waited 5 s for nothing. While
// shutting down, Run closes a connection that stayed without a request for
// freshGrace, as Shutdown closes idle keep-alive ones (a client's
// Transport sends a request that found its connection closed, nothing
// written, again on a new one).
const (
	freshCheck = 50 * time.Millisecond
	freshGrace = 200 * time.Millisecond
)

// track follows the connections without a request yet (http.Server's
// ConnState hook).
func (s *Server) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateNew {
		s.fresh[c] = time.Now()
	} else {
		delete(s.fresh, c)
	}
}

// closeFresh closes the connections without a request for at least grace.
func (s *Server) closeFresh(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, since := range s.fresh {
		if time.Since(since) >= grace {
			_ = c.Close()
			delete(s.fresh, c)
		}
	}
}
