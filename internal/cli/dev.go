package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// runDev is dq dev: the whole system in one process, or one piece of it.
func runDev(ctx context.Context, env Env, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "etcd":
			return runDevEtcd(ctx, env, args[1:])
		case "kafka":
			return runDevKafka(ctx, env, args[1:])
		case "sink":
			return runDevSink(ctx, env, args[1:])
		default:
			return fmt.Errorf("dev: unknown component %q (etcd, kafka, sink, or nothing for the whole system)", args[0])
		}
	}
	return runDevAll(ctx, env, args)
}

// runDevSink is a webhook receiver for trying delayq out: it logs every
// task the work binary delivers and answers 200.
func runDevSink(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev sink", env)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	log := slog.New(slog.NewTextHandler(env.Stdout, nil))
	log.Info("sink listening", "addr", ln.Addr().String())
	srv := &http.Server{Handler: SinkHandler(log, nil), ReadHeaderTimeout: 10 * time.Second}
	return serveUntil(ctx, srv, ln)
}

// SinkHandler answers GET /healthz and logs every other request as a
// delivered task (Dq-Id, Dq-Type, Dq-Attempt headers and the payload),
// answering 200. count, when not nil, counts deliveries.
func SinkHandler(log *slog.Logger, count *atomic.Int64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n") // a failed write means the prober went away: nothing to do
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if count != nil {
			count.Add(1)
		}
		attrs := []any{"task_id", r.Header.Get("Dq-Id"), "type", r.Header.Get("Dq-Type"), "attempt", r.Header.Get("Dq-Attempt")}
		if ms, err := strconv.ParseInt(r.Header.Get("Dq-Due-At"), 10, 64); err == nil {
			due := time.UnixMilli(ms)
			attrs = append(attrs, "due", due.Local().Format("15:04:05.000"), "after_due", time.Since(due).Round(time.Millisecond))
		}
		log.Info("task delivered", append(attrs, "payload", string(body))...)
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// serveUntil serves on ln until ctx ends, then shuts down gracefully.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		return err
	}
}
