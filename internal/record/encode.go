package record

import (
	"sort"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

func header(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }

// Fence is the dq-shard and dq-token headers the poller of shard, leading
// with fencing token, adds to every record it fires (Size counts them).
func Fence(shard int, token int64) (kafka.Header, kafka.Header) {
	return header(HeaderShard, strconv.Itoa(shard)), header(HeaderToken, strconv.FormatInt(token, 10))
}

func ms(t time.Time) string { return strconv.FormatInt(task.Millis(t), 10) }

// Encode is the Kafka record of a fired task: value = payload bytes
// unchanged, key = the task's key or id, the dq-* headers then the task's
// own headers (sorted by name), timestamp = fire time.
func Encode(t *task.Task, defaultTopic string, firedAt time.Time) kafka.Message {
	topic := t.Topic
	if topic == "" {
		topic = defaultTopic
	}
	ct := t.ContentType()
	// One buffer holds every header value and the key (a record is built
	// for every fired task: one allocation instead of a dozen).
	buf := make([]byte, 0, 2*len(t.ID)+len(t.Type)+len(ct)+len(t.Key)+96)
	val := func(start int) []byte { return buf[start:len(buf):len(buf)] }
	hs := make([]kafka.Header, 0, 10+len(t.Headers))
	n := len(buf)
	buf = append(buf, t.ID...)
	hs = append(hs, kafka.Header{Key: HeaderID, Value: val(n)})
	n = len(buf)
	buf = append(buf, t.Type...)
	hs = append(hs, kafka.Header{Key: HeaderType, Value: val(n)})
	n = len(buf)
	buf = strconv.AppendInt(buf, task.Millis(t.DueAt), 10)
	hs = append(hs, kafka.Header{Key: HeaderDueAt, Value: val(n)})
	n = len(buf)
	buf = strconv.AppendInt(buf, task.Millis(firedAt), 10)
	hs = append(hs, kafka.Header{Key: HeaderFiredAt, Value: val(n)})
	n = len(buf)
	buf = strconv.AppendInt(buf, int64(max(t.Attempt, 1)), 10)
	hs = append(hs, kafka.Header{Key: HeaderAttempt, Value: val(n)})
	n = len(buf)
	buf = strconv.AppendUint(buf, t.Gen, 10)
	hs = append(hs, kafka.Header{Key: HeaderGen, Value: val(n)})
	n = len(buf)
	buf = append(buf, ct...)
	hs = append(hs, kafka.Header{Key: HeaderContentType, Value: val(n)})
	n = len(buf)
	buf = strconv.AppendInt(buf, int64(t.Attempts()), 10)
	hs = append(hs, kafka.Header{Key: HeaderMaxAttempts, Value: val(n)})
	if t.Timeout > 0 {
		hs = append(hs, header(HeaderTimeoutMS, strconv.FormatInt(t.Timeout.Milliseconds(), 10)))
	}
	if t.Priority != 0 {
		hs = append(hs, header(HeaderPriority, strconv.Itoa(t.Priority)))
	}
	if len(t.Headers) > 0 {
		names := make([]string, 0, len(t.Headers))
		for k := range t.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			hs = append(hs, header(k, t.Headers[k]))
		}
	}
	n = len(buf)
	buf = append(buf, t.KafkaKey()...)
	return kafka.Message{
		Topic:   topic,
		Key:     val(n),
		Value:   t.Payload,
		Headers: hs,
		Time:    firedAt,
	}
}
