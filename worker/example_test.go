package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/worker"
)

// A worker with one Go handler. It runs until interrupted; Run returns
// after running handlers finished and their offsets were committed.
func Example() {
	if err := runWorker(); err != nil {
		log.Fatal(err)
	}
}

// runWorker builds and runs the worker; returning (rather than exiting)
// lets the deferred closes run.
func runWorker() error {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	w, err := worker.New(worker.Config{
		Brokers: []string{"127.0.0.1:9092"},
		Redis:   rdb,
	})
	if err != nil {
		return err
	}
	w.Handle("order.cancel", func(ctx context.Context, t *worker.Task) error {
		order, err := worker.JSON[Order](t)
		if err != nil {
			return err // marked Permanent: retrying will not fix the payload
		}
		return cancelOrder(ctx, order.ID) // an error is retried with backoff
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return w.Run(ctx)
}

// Order is the payload of an order.cancel task, as its producer encoded
// it (client.JSONPayload).
type Order struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
}

func cancelOrder(ctx context.Context, id string) error { return nil }

// JSON decodes a task's payload into a typed value. A payload that does
// not decode fails the task for good: the error is marked Permanent.
func ExampleJSON() {
	t := &worker.Task{ID: "order-42", Type: "order.cancel", ContentType: "application/json",
		Payload: []byte(`{"id":"42","items":3}`)}
	order, err := worker.JSON[Order](t)
	fmt.Println(order.ID, order.Items, err)

	t.Payload = []byte(`{"id":42}`) // a number where Order has a string
	_, err = worker.JSON[Order](t)
	var typeErr *json.UnmarshalTypeError
	fmt.Println(worker.IsPermanent(err), errors.As(err, &typeErr))
	fmt.Println(err)
	// Output:
	// 42 3 <nil>
	// true true
	// decode payload of task "order-42" (type "order.cancel", application/json) as worker_test.Order: json: cannot unmarshal number into Go struct field Order.id of type string
}

// Handlers say what a failure means by marking the error they return.
func ExampleRetryAfter() {
	handler := func(ctx context.Context, t *worker.Task) error {
		// The downstream service asked us to come back in 30 seconds.
		return worker.RetryAfter(30*time.Second, errors.New("429 too many requests"))
	}
	err := handler(context.Background(), &worker.Task{ID: "a"})
	d, ok := worker.RetryDelay(err)
	fmt.Println(d, ok, worker.IsPermanent(err))
	// Output: 30s true false
}

func ExamplePermanent() {
	err := fmt.Errorf("order a: %w", worker.Permanent(errors.New("404 no such order")))
	fmt.Println(worker.IsPermanent(err), err)
	// Output: true order a: 404 no such order
}

// The delays before the next attempts with the defaults (1s doubling to at
// most 10m), without the random jitter (u = 0).
func ExampleBackoff() {
	var b worker.Backoff
	for attempt := 1; attempt <= 12; attempt += 3 {
		fmt.Printf("after attempt %d: %v\n", attempt, b.Delay(attempt, 0))
	}
	// Output:
	// after attempt 1: 1s
	// after attempt 4: 8s
	// after attempt 7: 1m4s
	// after attempt 10: 8m32s
}

// An embedded worker that applies delayq's live rate limits: the rules
// stored in etcd (`dq limits set ...`, PUT /v1/limits/{type}), shared with
// every other worker of the namespace through Redis. Run watches the rules
// while the worker runs.
func ExampleNewLiveLimits() {
	if err := runLimitedWorker(); err != nil {
		log.Fatal(err)
	}
}

// runLimitedWorker builds and runs the rate-limited worker; returning
// (rather than exiting) lets the deferred closes run.
func runLimitedWorker() error {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer etcd.Close()

	limits, err := worker.NewLiveLimits(etcd, rdb, worker.LiveLimitsOptions{Namespace: "dq"})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		Brokers: []string{"127.0.0.1:9092"},
		Redis:   rdb,
		Limiter: limits,
	})
	if err != nil {
		return err
	}
	w.Handle("report.render", func(ctx context.Context, t *worker.Task) error {
		return nil // with a rule {"concurrency":{"limit":2,"slot_ttl":"30s"}}, at most two run at once
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return w.Run(ctx)
}

// An outcome callback: it runs after each outcome is stored in Redis and
// must not block, so it hands the outcome to a buffered channel (dropping
// it when the channel is full) that another goroutine drains.
func ExampleConfig_onOutcome() {
	receipts := make(chan string, 1024)
	cfg := worker.Config{
		Brokers: []string{"127.0.0.1:9092"},
		OnOutcome: func(o worker.Outcome) {
			if o.Kind != worker.OutcomeSucceeded || o.Task.Type != "payment.charge" {
				return
			}
			select {
			case receipts <- o.Task.ID: // send the receipt elsewhere
			default: // full: never hold the worker back
			}
		},
	}
	// what the worker calls once a charge succeeded:
	cfg.OnOutcome(worker.Outcome{Kind: worker.OutcomeSucceeded, Task: &worker.Task{ID: "charge-42", Type: "payment.charge"}})
	fmt.Println(<-receipts)
	// Output: charge-42
}
