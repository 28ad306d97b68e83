package record

import "github.com/segmentio/kafka-go"

// The Kafka record headers delayq sets (the contract other consumers
// depend on). Header names starting with "dq-" are reserved: a task's own
// headers may not use the prefix.
const (
	HeaderID          = "dq-id"
	HeaderType        = "dq-type"
	HeaderDueAt       = "dq-due-at"   // unix ms, decimal
	HeaderFiredAt     = "dq-fired-at" // unix ms, decimal
	HeaderAttempt     = "dq-attempt"  // 1-based
	HeaderGen         = "dq-gen"      // fire generation, decimal
	HeaderContentType = "dq-content-type"
	HeaderMaxAttempts = "dq-max-attempts"
	HeaderTimeoutMS   = "dq-timeout-ms" // only when the task has a timeout
	HeaderPriority    = "dq-priority"   // only when non-zero
	// HeaderShard and HeaderToken name the shard and the fencing token of
	// the leader that fired the record (for audits: a record whose token is
	// lower than one its shard fired earlier came from a deposed leader).
	HeaderShard = "dq-shard"
	HeaderToken = "dq-token"

	// Dead-letter records.
	HeaderError = "dq-error" // why
	// HeaderPayloadBytes is a dead-letter record's original payload size
	// when its value was cut (EncodeDead) or left out (DeadLetter).
	HeaderPayloadBytes = "dq-payload-bytes"
	HeaderDeadAt       = "dq-dead-at"      // worker dead letters: unix ms
	HeaderSourceTopic  = "dq-source-topic" // worker dead letters: where the record was read
	HeaderSourcePart   = "dq-source-partition"
	HeaderSourceOffset = "dq-source-offset"
)

// The trace context of a task (W3C Trace Context and Baggage, package
// tracing): kept among the task's own headers under these names, so
// that a fired record carries them like any task header; dead-letter
// and outcome records carry them too (traceHeaders). Pinned: a consumer
// continues the producer's trace from them.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
	HeaderBaggage     = "baggage"
)

// traceHeaders appends the trace context headers of a task's headers.
func traceHeaders(hs []kafka.Header, own map[string]string) []kafka.Header {
	if own[HeaderTraceparent] == "" {
		return hs
	}
	for _, k := range [...]string{HeaderTraceparent, HeaderTracestate, HeaderBaggage} {
		if v := own[k]; v != "" {
			hs = append(hs, header(k, v))
		}
	}
	return hs
}
