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
// ctx ends, return why it stopped.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error

// Main is the body of every delayq binary's main: run until SIGINT or
// SIGTERM (a graceful shutdown), exit 0 for -h, exit 1 with the error
// prefixed by the binary's name otherwise.
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, ErrHelp) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
