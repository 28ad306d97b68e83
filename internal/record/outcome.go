package record

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/jsonw"
	"github.com/delayq/delayq/internal/task"
)

// Outcome records: what happened to a task, published best effort to the
// outcomes topic (DefaultOutcomesTopic) after it was recorded in Redis.
//
// The record's key is the task id, its value the JSON object OutcomeRecord
// describes, its timestamp the finish time, and its headers dq-id (the
// task id), dq-outcome (the outcome) and dq-type (the task type), so that
// a consumer can filter without decoding the value. Consumers must ignore JSON fields they do not
// know: new ones may be added.

// HeaderOutcome names the outcome of an outcome record (succeeded, failed,
// dead, cancelled, delivered).
const HeaderOutcome = "dq-outcome"

// DefaultOutcomesTopic is the outcomes topic unless DQ_OUTCOMES_TOPIC says
// otherwise.
const DefaultOutcomesTopic = "dq.outcomes"

// The outcomes. Succeeded, Dead, Cancelled and Delivered are terminal
// (one per task and generation); Failed is an attempt that failed and will
// be retried. Delivered is published by the event process for a task fired
// to a topic no delayq work process handles, once Kafka acknowledged its
// record: nothing ran it, so no hook is called for it.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeDead      = "dead"
	OutcomeCancelled = "cancelled"
	OutcomeDelivered = "delivered"
)

// ValidOutcome reports whether s is one of the outcomes.
func ValidOutcome(s string) bool {
	switch s {
	case OutcomeSucceeded, OutcomeFailed, OutcomeDead, OutcomeCancelled, OutcomeDelivered:
		return true
	}
	return false
}

// OutcomeErrorMax bounds an outcome record's error (longer ones are cut),
// and OutcomeValueMax the value ParseOutcome accepts.
const (
	OutcomeErrorMax = DeadReasonMax
	OutcomeValueMax = 1 << 20
)

// OutcomeTimeLayout is how outcome records write times: RFC 3339 in UTC
// with milliseconds, as the daemon's API does.
const OutcomeTimeLayout = task.TimeLayout

// OutcomeRecord is the value of an outcome record. JSON:
//
//	{"id":"order-1","type":"email.send","outcome":"dead","attempt":3,
//	 "max_attempts":3,"error":"smtp: 550","due_at":"2026-01-02T03:04:05.678Z",
//	 "finished_at":"2026-01-02T03:04:07.001Z","duration_ms":120,"shard":4,
//	 "headers":{"tenant":"acme"}}
//
// error, due_at and headers are left out when empty; shard is -1 when not
// known (e.g. a record fired by an older event process). A record that
// carries a fire receipt (a delivered outcome: where Kafka put the task's
// record) adds "fired_at", "partition" and "offset"; all three are left
// out when FiredAt is zero.
type OutcomeRecord struct {
	ID      string // the task id (also the Kafka key)
	Type    string
	Outcome string // one of the Outcome* constants
	// Attempt is the 1-based attempt the outcome is about (the attempt
	// that succeeded, failed or was the last; for a cancelled task the
	// attempt it would have run next).
	Attempt     int
	MaxAttempts int
	Error       string    // why it failed or died; empty otherwise
	DueAt       time.Time // when the attempt was due; zero when not known
	FinishedAt  time.Time // when the outcome was recorded
	// Duration is how long the handler ran (zero when nothing ran, as for
	// a cancelled task or one dead at fire time). Written in whole ms.
	Duration time.Duration
	Shard    int               // the task's shard, -1 when not known
	Headers  map[string]string // the task's own headers; nil when none
	// The fire receipt, where the outcome carries one (a delivered task):
	// when its record was produced and where Kafka put it. Zero FiredAt:
	// none (Partition and Offset are then 0 and not written).
	FiredAt   time.Time
	Partition int32
	Offset    int64
}

type outcomeJSON struct {
	ID          string            `json:"id"`
	Type        string            `json:"type"`
	Outcome     string            `json:"outcome"`
	Attempt     int               `json:"attempt"`
	MaxAttempts int               `json:"max_attempts"`
	Error       string            `json:"error,omitempty"`
	DueAt       string            `json:"due_at,omitempty"`
	FinishedAt  string            `json:"finished_at"`
	DurationMS  int64             `json:"duration_ms"`
	Shard       int               `json:"shard"`
	Headers     map[string]string `json:"headers,omitempty"`
	FiredAt     string            `json:"fired_at,omitempty"`
	Partition   *int32            `json:"partition,omitempty"` // 0 is a partition: written with fired_at
	Offset      *int64            `json:"offset,omitempty"`
}

// EncodeOutcome is the Kafka record of o for topic: key = id, value =
// JSON, headers dq-id, dq-outcome and dq-type (and the task's trace
// context: traceparent, tracestate, baggage), timestamp = finish time. The error
// is cut to OutcomeErrorMax bytes (at a UTF-8 boundary).
func EncodeOutcome(o *OutcomeRecord, topic string) kafka.Message {
	return kafka.Message{
		Topic: topic,
		Key:   []byte(o.ID),
		Value: AppendOutcomeJSON(nil, o),
		Headers: traceHeaders([]kafka.Header{
			header(HeaderID, o.ID),
			header(HeaderOutcome, o.Outcome),
			header(HeaderType, o.Type),
		}, o.Headers),
		Time: o.FinishedAt,
	}
}

// AppendOutcomeJSON appends the value of o's outcome record: the JSON
// object of outcomeJSON, byte for byte what encoding/json writes of it
// (fields in that order, empty ones omitted as its omitempty tags say,
// headers sorted by name, strings escaped as json.Marshal escapes them:
// FuzzOutcomeJSONSameAsMarshal compares the two). Written by hand: the
// reflection of json.Marshal was ~1.6 µs of a work process' CPU per
// handled task (bench-scale's profile), BenchmarkEncodeOutcome.
func AppendOutcomeJSON(b []byte, o *OutcomeRecord) []byte {
	// room for the fields, three times and the strings unescaped: one
	// allocation for most records
	n := 256 + len(o.ID) + len(o.Type) + len(o.Outcome) + min(len(o.Error), OutcomeErrorMax)
	for k, v := range o.Headers {
		n += len(k) + len(v) + 6
	}
	b = slices.Grow(b, n)
	b = append(b, `{"id":`...)
	b = jsonw.AppendString(b, o.ID)
	b = append(b, `,"type":`...)
	b = jsonw.AppendString(b, o.Type)
	b = append(b, `,"outcome":`...)
	b = jsonw.AppendString(b, o.Outcome)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(o.Attempt), 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(o.MaxAttempts), 10)
	if e := task.Clip(o.Error, OutcomeErrorMax); e != "" {
		b = append(b, `,"error":`...)
		b = jsonw.AppendString(b, e)
	}
	if !o.DueAt.IsZero() {
		b = append(b, `,"due_at":`...)
		b = appendOutcomeTime(b, o.DueAt)
	}
	b = append(b, `,"finished_at":`...)
	if o.FinishedAt.IsZero() {
		b = append(b, `""`...)
	} else {
		b = appendOutcomeTime(b, o.FinishedAt)
	}
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, o.Duration.Milliseconds(), 10)
	b = append(b, `,"shard":`...)
	b = strconv.AppendInt(b, int64(o.Shard), 10)
	if len(o.Headers) > 0 {
		b = append(b, `,"headers":{`...)
		var small [8]string // a task has few headers: sorted without allocating
		keys := small[:0]
		for k := range o.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonw.AppendString(b, k)
			b = append(b, ':')
			b = jsonw.AppendString(b, o.Headers[k])
		}
		b = append(b, '}')
	}
	if !o.FiredAt.IsZero() {
		b = append(b, `,"fired_at":`...)
		b = appendOutcomeTime(b, o.FiredAt)
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(o.Partition), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, o.Offset, 10)
	}
	return append(b, '}')
}

// appendOutcomeTime appends t as a JSON string in OutcomeTimeLayout (its
// characters need no escaping).
func appendOutcomeTime(b []byte, t time.Time) []byte {
	return append(jsonw.AppendTime(append(b, '"'), t), '"')
}

// Why an outcome topic's record is not one delayq published (Forged).
const (
	// ForgedUnmarked: no dq-outcome header, the publisher's marker
	// (EncodeOutcome sets it; a task's own headers may not start with
	// "dq-", so a task fired into the outcomes topic cannot carry it).
	ForgedUnmarked = "unmarked"
	// ForgedTaskRecord: the record carries the headers of a fired task
	// (dq-fired-at, dq-gen; Encode): a task fired into the outcomes topic.
	ForgedTaskRecord = "task_record"
)

// Forged says why m, read from the outcomes topic, cannot be an outcome
// record that delayq published (ForgedUnmarked, ForgedTaskRecord), or ""
// when it can be. A consumer that acts on outcomes (the outcome hooks)
// checks it before ParseOutcome: a producer allowed to schedule tasks
// could otherwise fire one whose payload is a made-up outcome into the
// outcomes topic. ParseOutcome alone reads the value, also where it comes
// without its record (a hook request's body).
func Forged(m *kafka.Message) string {
	marked := false
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderFiredAt, HeaderGen:
			return ForgedTaskRecord
		case HeaderOutcome:
			marked = true
		}
	}
	if !marked {
		return ForgedUnmarked
	}
	return ""
}

// ParseOutcome reads an outcome record. The value is authoritative; the
// key, when set, must be the id, and the dq-id, dq-outcome and dq-type
// headers, when present, must agree with it. Unknown JSON fields are ignored
// (newer publishers may add some). Any problem is a *HostileError.
func ParseOutcome(m *kafka.Message) (*OutcomeRecord, error) {
	if len(m.Value) > OutcomeValueMax {
		return nil, hostile("outcome record of %d bytes is over the limit of %d", len(m.Value), OutcomeValueMax)
	}
	var v outcomeJSON
	dec := json.NewDecoder(bytes.NewReader(m.Value))
	if err := dec.Decode(&v); err != nil {
		return nil, hostile("outcome value is not the expected JSON object: %s", short(err.Error()))
	}
	if dec.More() {
		return nil, hostile("outcome value has data after the JSON object")
	}
	if err := task.ValidateStoredID(v.ID); err != nil {
		return nil, hostile("bad outcome id: %v", err)
	}
	if v.Type == "" || len(v.Type) > task.MaxTypeLen {
		return nil, hostile("missing or bad outcome type")
	}
	if !ValidOutcome(v.Outcome) {
		return nil, hostile("unknown outcome %q", short(v.Outcome))
	}
	if v.Attempt < 0 || v.Attempt > task.MaxMaxAttempts {
		return nil, hostile("outcome attempt %d out of range", v.Attempt)
	}
	if v.MaxAttempts < 0 || v.MaxAttempts > task.MaxMaxAttempts {
		return nil, hostile("outcome max_attempts %d out of range", v.MaxAttempts)
	}
	if v.DurationMS < 0 {
		return nil, hostile("outcome duration_ms %d is negative", v.DurationMS)
	}
	if v.Shard < -1 || v.Shard >= 1<<16 {
		return nil, hostile("outcome shard %d out of range", v.Shard)
	}
	if len(v.Headers) > task.MaxHeaders {
		return nil, hostile("outcome has %d headers", len(v.Headers))
	}
	o := &OutcomeRecord{
		ID: v.ID, Type: v.Type, Outcome: v.Outcome, Attempt: v.Attempt, MaxAttempts: v.MaxAttempts,
		Error: v.Error, Duration: time.Duration(min(v.DurationMS, int64(time.Duration(1<<63-1)/time.Millisecond))) * time.Millisecond,
		Shard: v.Shard, Headers: v.Headers,
	}
	var err error
	if v.DueAt != "" {
		if o.DueAt, err = time.Parse(time.RFC3339Nano, v.DueAt); err != nil {
			return nil, hostile("bad outcome due_at %q", short(v.DueAt))
		}
		o.DueAt = o.DueAt.UTC()
	}
	if o.FinishedAt, err = time.Parse(time.RFC3339Nano, v.FinishedAt); err != nil {
		return nil, hostile("bad outcome finished_at %q", short(v.FinishedAt))
	}
	o.FinishedAt = o.FinishedAt.UTC()
	if err := parseReceipt(&v, o); err != nil {
		return nil, err
	}
	if len(o.Headers) == 0 {
		o.Headers = nil
	}
	if len(m.Key) > 0 && string(m.Key) != o.ID {
		return nil, hostile("outcome key %q is not its id", short(string(m.Key)))
	}
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderOutcome:
			if string(h.Value) != o.Outcome {
				return nil, hostile("%s header %q disagrees with the value", HeaderOutcome, short(string(h.Value)))
			}
		case HeaderID:
			if string(h.Value) != o.ID {
				return nil, hostile("%s header %q disagrees with the value", HeaderID, short(string(h.Value)))
			}
		case HeaderType:
			if string(h.Value) != o.Type {
				return nil, hostile("%s header %q disagrees with the value", HeaderType, short(string(h.Value)))
			}
		}
	}
	return o, nil
}

// parseReceipt reads the fire receipt of an outcome value into o: all of
// fired_at, partition and offset, or none of them.
func parseReceipt(v *outcomeJSON, o *OutcomeRecord) error {
	if v.FiredAt == "" {
		if v.Partition != nil || v.Offset != nil {
			return hostile("outcome partition or offset without fired_at")
		}
		return nil
	}
	at, err := time.Parse(time.RFC3339Nano, v.FiredAt)
	if err != nil || at.Before(time.Unix(0, 0)) || at.UTC().Year() > 9999 {
		return hostile("bad outcome fired_at %q", short(v.FiredAt))
	}
	switch {
	case v.Partition == nil || v.Offset == nil:
		return hostile("outcome fired_at without partition and offset")
	case *v.Partition < 0:
		return hostile("outcome partition %d is negative", *v.Partition)
	case *v.Offset < 0:
		return hostile("outcome offset %d is negative", *v.Offset)
	}
	o.FiredAt, o.Partition, o.Offset = at.UTC(), *v.Partition, *v.Offset
	return nil
}
