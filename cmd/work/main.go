// Command work runs delayq's fired tasks: it consumes them from Kafka, calls
// their webhooks, and stores each outcome (done, retry later, dead) in
// Redis. Configuration comes from flags and DQ_* environment variables; run
// "work -h" for the list.
package main

import (
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/work"
)

func main() { config.Main("work", work.Run) }
