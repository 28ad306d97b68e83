// Command event leads a fair share of delayq's shards (etcd elections) and
// fires their due tasks into Kafka within milliseconds of the due time.
package main

import (
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/event"
)

func main() { config.Main("event", event.Run) }
