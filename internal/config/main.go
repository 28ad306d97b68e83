package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// RunFunc is a binary's whole life: parse args and environment, run until
// ctx ends, return why it stopped. Each cmd/<binary> passes its run to
// Main; dq runs the same functions by name (internal/cli).
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error

// Main is the body of every delayq binary's main: "version" or
// "--version" prints the build's version; otherwise run until SIGINT or
// SIGTERM (a graceful shutdown), and exit with ExitCode.
func Main(name string, run RunFunc) {
	if IsVersionArgs(os.Args[1:]) {
		fmt.Fprintln(os.Stdout, Version(name))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
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
