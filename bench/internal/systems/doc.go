// Package systems starts the two systems under comparison on shared
// infrastructure (one redis-server, one embedded etcd, one kfake broker):
//
//   - delayq: the real daemon (internal/daemon) and one or more event
//     processes (internal/event) in-process, a fresh namespace and Kafka
//     topic per start, and a franz-go consumer that records when each fired
//     task becomes visible;
//   - asynq: an asynq.Client and optionally an asynq.Server whose handler
//     records its start time.
//
// Every start is bound to a tbenv scope: closing the scope stops what was
// started, so that one workload's processes never load the next one.
package systems
