package worker

import "github.com/delayq/delayq/internal/record"

// The Kafka record headers delayq writes (the pinned record contract,
// owned by internal/record) and the ones the worker adds to dead letters.
const (
	HeaderID          = record.HeaderID
	HeaderType        = record.HeaderType
	HeaderDueAt       = record.HeaderDueAt   // unix ms, decimal
	HeaderFiredAt     = record.HeaderFiredAt // unix ms, decimal
	HeaderAttempt     = record.HeaderAttempt // 1-based
	HeaderGen         = record.HeaderGen     // fire generation, decimal
	HeaderContentType = record.HeaderContentType
	HeaderMaxAttempts = record.HeaderMaxAttempts
	HeaderTimeoutMS   = record.HeaderTimeoutMS
	HeaderPriority    = record.HeaderPriority

	HeaderError        = record.HeaderError        // dead letters: why
	HeaderDeadAt       = record.HeaderDeadAt       // dead letters: unix ms
	HeaderSourceTopic  = record.HeaderSourceTopic  // dead letters: where the record was read
	HeaderSourcePart   = record.HeaderSourcePart   // dead letters: its partition
	HeaderSourceOffset = record.HeaderSourceOffset // dead letters: its offset
	HeaderPayloadBytes = record.HeaderPayloadBytes // dead letters whose value was left out: its size
)
