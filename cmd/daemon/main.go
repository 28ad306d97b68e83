// Command daemon is delayq's ingress: the HTTP API that schedules, moves,
// cancels and reads delayed tasks, journaling writes while Redis is down.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := daemon.Run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if errors.Is(err, config.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon:", err)
		os.Exit(1)
	}
}
