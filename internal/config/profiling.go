package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// PprofEnv names the address on which a binary serves Go's runtime
// profiles (net/http/pprof: /debug/pprof/...) while it runs; unset, it
// serves none. It is a listener of its own, never the API or metrics port:
// profiles show the process' internals, so it should be a loopback address
// (127.0.0.1:6060) or one only operators reach.
const PprofEnv = "DQ_PPROF_ADDR"

// WithProfiling is run with the runtime profiles served on PprofEnv's
// address while it runs (when it is set; an address that cannot be
// listened on is refused, naming the variable).
func WithProfiling(run RunFunc) RunFunc {
	return func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		addr := getenv(PprofEnv)
		if addr == "" {
			return run(ctx, args, getenv, stderr)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s %q: %w", PprofEnv, addr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		slog.New(slog.NewJSONHandler(stderr, nil)).Info("serving runtime profiles", "component", "pprof", "addr", ln.Addr().String())
		err = run(ctx, args, getenv, stderr)
		_ = srv.Close()
		if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			return errors.Join(err, fmt.Errorf("%s: %w", PprofEnv, serr))
		}
		return err
	}
}
