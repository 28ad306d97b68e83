// Command event leads a fair share of delayq's shards (etcd elections) and
// fires their due tasks into Kafka within milliseconds of the due time.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/event"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := event.Run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if errors.Is(err, config.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "event:", err)
		os.Exit(1)
	}
}
