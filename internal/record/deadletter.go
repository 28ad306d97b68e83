package record

import (
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

// DeadPayloadMax and DeadReasonMax bound a dead-letter record's value and
// dq-error header, so that the copy of a record Kafka refused as too large
// always fits (well under the broker's 1 MB default); the whole payload
// stays in the task's Redis record, which redrive fires again.
const (
	DeadPayloadMax = 16 << 10
	DeadReasonMax  = 1 << 10
)

// EncodeDead is the dead-letter record of a task that cannot be fired to
// its own topic: key = id, value = the payload when it could be read (its
// first DeadPayloadMax bytes, with dq-payload-bytes the whole size when
// cut), headers dq-id, dq-gen, dq-fired-at, dq-error (the reason, cut to
// DeadReasonMax; and dq-due-at, dq-type when known), and the task's trace
// context (traceparent, tracestate, baggage) when it has one.
func EncodeDead(t *task.Task, deadTopic string, firedAt time.Time, reason string) kafka.Message {
	id := task.Clip(t.ID, DeadReasonMax)
	hs := []kafka.Header{
		header(HeaderID, id),
		header(HeaderGen, strconv.FormatUint(t.Gen, 10)),
		header(HeaderFiredAt, ms(firedAt)),
		header(HeaderError, task.Clip(reason, DeadReasonMax)),
	}
	if !t.DueAt.IsZero() {
		hs = append(hs, header(HeaderDueAt, ms(t.DueAt)))
	}
	if t.Type != "" {
		hs = append(hs, header(HeaderType, task.Clip(t.Type, DeadReasonMax)))
	}
	hs = traceHeaders(hs, t.Headers)
	value := t.Payload
	if len(value) > DeadPayloadMax {
		hs = append(hs, header(HeaderPayloadBytes, strconv.Itoa(len(value))))
		value = value[:DeadPayloadMax]
	}
	return kafka.Message{Topic: deadTopic, Key: []byte(id), Value: value, Headers: hs, Time: firedAt}
}

// DeadLetter is a consumer's dead letter for the record m it read: the
// same key, value and headers, with dq-error (cut to DeadReasonMax),
// dq-attempt (when attempt > 0), dq-dead-at and where m was read
// (dq-source-*). A value larger than maxValue is left out (its size in
// dq-payload-bytes); a negative maxValue keeps it whatever its size. The
// topic is left to the caller.
func DeadLetter(m *kafka.Message, reason string, attempt int, now time.Time, maxValue int) kafka.Message {
	drop := map[string]bool{HeaderError: true, HeaderDeadAt: true, HeaderSourceTopic: true,
		HeaderSourcePart: true, HeaderSourceOffset: true, HeaderPayloadBytes: true}
	if attempt > 0 {
		drop[HeaderAttempt] = true
	}
	hs := make([]kafka.Header, 0, len(m.Headers)+7)
	for _, h := range m.Headers {
		if !drop[h.Key] {
			hs = append(hs, h)
		}
	}
	reason = task.Clip(reason, DeadReasonMax)
	hs = append(hs,
		kafka.Header{Key: HeaderError, Value: []byte(reason)},
		kafka.Header{Key: HeaderDeadAt, Value: []byte(strconv.FormatInt(task.Millis(now), 10))},
		kafka.Header{Key: HeaderSourceTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: HeaderSourcePart, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
	)
	if attempt > 0 {
		hs = append(hs, kafka.Header{Key: HeaderAttempt, Value: []byte(strconv.Itoa(attempt))})
	}
	value := m.Value
	if maxValue >= 0 && len(value) > maxValue {
		hs = append(hs, kafka.Header{Key: HeaderPayloadBytes, Value: []byte(strconv.Itoa(len(value)))})
		value = nil
	}
	return kafka.Message{Key: m.Key, Value: value, Headers: hs}
}
