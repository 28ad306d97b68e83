package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/delayq/delayq/internal/tracing"
)

// RunFunc is a binary's whole life: parse args and environment, run until
// ctx ends, return why it stopped. Each cmd/<binary> passes its run to
// Main; dq runs the same functions by name (internal/cli).
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error

// Main is the body of every delayq binary's main: "version" or
// "--version" prints the build's version; otherwise start again with the
// runtime's monitor kept out of its deep sleep (KeepSysmonAwake), set up
// tracing from the OTEL_* variables (tracing.Setup: off by default), run
// until SIGINT or SIGTERM (a graceful shutdown), flush the spans and exit
// with ExitCode.
func Main(name string, run RunFunc) {
	if IsVersionArgs(os.Args[1:]) {
		fmt.Fprintln(os.Stdout, Version(name))
		return
	}
	KeepSysmonAwake(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := WithProcess(name, run)(ctx, os.Args[1:], os.Getenv, os.Stderr)
	code := ExitCode(ctx, name, err, os.Stderr)
	stop()
	os.Exit(code)
}

// ExitCode is the exit status of a binary whose run returned err: 0 for
// success, for -h (the usage was printed), and for a shutdown asked for by
// ctx's end (SIGINT, SIGTERM) when the only error is that cancellation;
// the code of an error with an ExitCode() int method; 1 otherwise. Every
// non-zero code writes "name: err" to stderr.
func ExitCode(ctx context.Context, name string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, ErrHelp) {
		return 0
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) && ec.ExitCode() > 0 {
		return ec.ExitCode()
	}
	return 1
}

// WithProcess is run as every binary runs it, whether started as itself
// or as the dq binary's named app: with its tracing (WithTracing) and its
// runtime profiles (WithProfiling) around it.
func WithProcess(name string, run RunFunc) RunFunc { return WithProfiling(WithTracing(name, run)) }

// WithTracing is run with the process' tracing set up around it from the
// OTEL_* variables (tracing.Setup: off unless they ask for it; the
// OpenTelemetry SDK reads them from the process' environment), as
// service "delayq-<name>"; the spans of its last seconds are flushed
// when it returns (5 s at most).
func WithTracing(name string, run RunFunc) RunFunc {
	return func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		end, err := tracing.Setup(ctx, tracing.Options{Service: "delayq-" + name, Version: Version(name)},
			slog.New(slog.NewJSONHandler(stderr, nil)).With("component", "tracing"))
		if err != nil {
			return err
		}
		err = run(ctx, args, getenv, stderr)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = end(fctx) // an export that fails was logged by the exporter
		return err
	}
}
