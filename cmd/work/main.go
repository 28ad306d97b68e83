// Command work runs delayq's fired tasks: it consumes them from Kafka, calls
// their webhooks, and stores each outcome (done, retry later, dead) in
// Redis. Configuration comes from flags and DQ_* environment variables; run
// "work -h" for the list.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/work"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := work.Run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if errors.Is(err, config.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "work:", err)
		os.Exit(1)
	}
}
