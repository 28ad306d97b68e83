package embedded_test

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/embedded"
)

// A producer that runs the daemon in its own process: the daemon's flags
// (or DQ_* variables), a journal directory of its own, and the producer's
// HTTP server for /metrics and /readyz.
func Example() {
	ctx := context.Background()
	p, err := embedded.Open(ctx, embedded.Options{Args: []string{
		"-redis-addrs=redis:6379",
		"-journal-dir=/var/lib/orders/dq-journal",
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	http.Handle("/delayq/", http.StripPrefix("/delayq", p.Handler()))

	res, err := p.Schedule(ctx, client.Task{
		ID:      "cancel-order-123",
		Type:    "order.cancel",
		Payload: json.RawMessage(`{"order":123}`),
		Delay:   24 * time.Hour,
	})
	if err != nil {
		log.Print(err) // a *client.APIError for a refused task (e.g. 422 naming the field)
		return
	}
	if res.Journaled() {
		log.Printf("Redis unreachable: %s is in the journal until it answers", res.ID)
	}
	// the rest of the API, in process
	if err := p.Client().Cancel(ctx, "cancel-order-123"); err != nil {
		log.Print(err)
	}
}
