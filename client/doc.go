// Package client is a small Go client for the delayq daemon's HTTP API:
// schedule delayed tasks (one or a batch), move or cancel them before they
// fire, read them back, and look after dead tasks.
//
//	c := client.New("http://127.0.0.1:7070", client.WithToken(os.Getenv("DQ_API_TOKEN")))
//	res, err := c.Schedule(ctx, client.Task{
//		ID:      "order-42-cancel",      // idempotency key; empty: the daemon generates one
//		Type:    "order.cancel",
//		Payload: json.RawMessage(`{"order":42}`),
//		Delay:   24 * time.Hour,
//	})
//
// A Task is scheduled at DueAt, or Delay from now (measured on Redis'
// clock), or now when neither is set. Re-submitting the same id with the
// same content is a no-op (Result.Outcome "unchanged"); with other content
// while the task still waits it is an upsert ("updated").
//
// When the daemon cannot reach Redis it keeps the task in its durable
// journal and answers with State "journaled" (Result.Journaled); the task
// reaches Redis once it is back.
//
// Errors from the API are *APIError values with the HTTP status and the
// API's error code; errors.Is(err, ErrNotFound) and errors.Is(err,
// ErrConflict) test the common cases.
package client
