package record

import (
	"strconv"

	"github.com/delayq/delayq/internal/task"
)

// The size of a task's Kafka record, so that the daemon can refuse at
// submit a task whose record the broker would refuse at fire time (it
// would never fire). It counts what the event process produces: Encode
// plus the dq-shard and dq-token headers the poller adds.
//
// Size = key + value + every header name and value + Overhead +
// HeaderOverhead per header, where the overheads are the Kafka record
// format v2 framing at its widest (a record may travel alone in a batch):
const (
	// Overhead: the record batch header (61 bytes) plus the
	// record's own fields with their varints at the widest: length 5,
	// attributes 1, timestamp delta 10, offset delta 5, key length 5,
	// value length 5, header count 5.
	Overhead = 61 + 5 + 1 + 10 + 5 + 5 + 5 + 5
	// HeaderOverhead: a header's name and value length varints at the
	// widest.
	HeaderOverhead = 5 + 5
)

// Widest decimal values of the headers that only the fire fixes.
const (
	maxMillisDigits  = 13 // dq-due-at, dq-fired-at: unix ms up to task.MaxDueMillis (and to year 2286)
	maxAttemptDigits = 4  // dq-attempt: up to task.MaxMaxAttempts
	maxGenDigits     = 10 // dq-gen: a uint32 in the stored record
	maxShardDigits   = 5  // dq-shard
	maxTokenDigits   = 19 // dq-token: an etcd revision (int64)
)

// Size is the size in bytes of the Kafka record task t becomes
// when it fires, by the formula above. Header values that depend on the
// fire (fired-at, attempt, generation, shard, token) count at their
// widest, so a task that fits now fits on every attempt.
func Size(t *task.Task) int {
	n := len(t.KafkaKey()) + len(t.Payload) + Overhead
	hdr := func(name string, valueLen int) {
		n += len(name) + valueLen + HeaderOverhead
	}
	hdr(HeaderID, len(t.ID))
	hdr(HeaderType, len(t.Type))
	hdr(HeaderDueAt, maxMillisDigits)
	hdr(HeaderFiredAt, maxMillisDigits)
	hdr(HeaderAttempt, maxAttemptDigits)
	hdr(HeaderGen, maxGenDigits)
	hdr(HeaderContentType, len(t.ContentType()))
	hdr(HeaderMaxAttempts, len(strconv.Itoa(t.Attempts())))
	if t.Timeout > 0 {
		hdr(HeaderTimeoutMS, len(strconv.FormatInt(t.Timeout.Milliseconds(), 10)))
	}
	if t.Priority != 0 {
		hdr(HeaderPriority, len(strconv.Itoa(t.Priority)))
	}
	for k, v := range t.Headers {
		hdr(k, len(v))
	}
	hdr(HeaderShard, maxShardDigits)
	hdr(HeaderToken, maxTokenDigits)
	return n
}
