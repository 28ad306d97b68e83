// Package outcome provides the best-effort publisher of outcome records
// (succeeded, failed, dead, cancelled; see record.OutcomeRecord) to the
// outcomes topic.
//
// A Publisher never blocks its caller: Publish puts the record in a
// bounded queue and one goroutine writes what is queued to Kafka in
// batches. What cannot be published is dropped and counted in
// delayq_outcomes_dropped_total{reason}: "queue_full" when the queue is
// full (Kafka slow or down), "kafka" when Kafka refused or did not confirm
// a write (each batch is tried a few times by kafka-go, then given up),
// "closed" when published after Close, "shutdown" for what was still
// queued when Close's deadline passed, and "read" when the caller could
// not read what to publish (Drop). The outcome itself is recorded in
// Redis before it is published: the topic is a notification, never the
// record of truth.
//
// The work process (worker outcomes), the event process (tasks made dead
// at fire time) and the daemon (cancellations) each run one.
package outcome
