// Command daemon is delayq's ingress: the HTTP API that schedules, moves,
// cancels and reads delayed tasks, journaling writes while Redis is down.
package main

import (
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
)

func main() { config.Main("daemon", daemon.Run) }
