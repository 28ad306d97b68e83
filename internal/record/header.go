package record

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
