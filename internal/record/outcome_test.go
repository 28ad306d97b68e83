package record

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/task"
)

func sampleOutcome() *OutcomeRecord {
	return &OutcomeRecord{
		ID: "order-1", Type: "email.send", Outcome: OutcomeDead, Attempt: 3, MaxAttempts: 3,
		Error:      "smtp: 550",
		DueAt:      time.UnixMilli(1767323045678).UTC(),
		FinishedAt: time.UnixMilli(1767323047001).UTC(),
		Duration:   120 * time.Millisecond, Shard: 4,
		Headers: map[string]string{"tenant": "acme"},
	}
}

func TestEncodeOutcomeWire(t *testing.T) {
	m := EncodeOutcome(sampleOutcome(), "dq.outcomes")
	if m.Topic != "dq.outcomes" || string(m.Key) != "order-1" || !m.Time.Equal(time.UnixMilli(1767323047001)) {
		t.Fatalf("got topic %q key %q time %v", m.Topic, m.Key, m.Time)
	}
	want := `{"id":"order-1","type":"email.send","outcome":"dead","attempt":3,"max_attempts":3,` +
		`"error":"smtp: 550","due_at":"2026-01-02T03:04:05.678Z","finished_at":"2026-01-02T03:04:07.001Z",` +
		`"duration_ms":120,"shard":4,"headers":{"tenant":"acme"}}`
	if string(m.Value) != want {
		t.Errorf("value\n got %s\nwant %s", m.Value, want)
	}
	if !reflect.DeepEqual(m.Headers, hdrs("dq-id", "order-1", "dq-outcome", "dead", "dq-type", "email.send")) {
		t.Errorf("headers %v", m.Headers)
	}
	// empty optional fields are left out; shard -1 stays
	o := &OutcomeRecord{ID: "a", Type: "t", Outcome: OutcomeCancelled, Attempt: 1, MaxAttempts: 10,
		FinishedAt: time.UnixMilli(0).UTC(), Shard: -1, Headers: map[string]string{}}
	m = EncodeOutcome(o, "x")
	want = `{"id":"a","type":"t","outcome":"cancelled","attempt":1,"max_attempts":10,` +
		`"finished_at":"1970-01-01T00:00:00.000Z","duration_ms":0,"shard":-1}`
	if string(m.Value) != want {
		t.Errorf("value\n got %s\nwant %s", m.Value, want)
	}
}

func TestOutcomeRoundTrip(t *testing.T) {
	for _, o := range []*OutcomeRecord{
		sampleOutcome(),
		{ID: "x", Type: "y", Outcome: OutcomeSucceeded, Attempt: 1, MaxAttempts: 1,
			FinishedAt: time.UnixMilli(1700000000001).UTC(), Shard: -1},
		{ID: "sched@1700000000000", Type: "cron.job", Outcome: OutcomeFailed, Attempt: 2, MaxAttempts: 5,
			Error: "boom", DueAt: time.UnixMilli(1700000000000).UTC(), FinishedAt: time.UnixMilli(1700000000500).UTC(),
			Duration: 3 * time.Second, Shard: 0},
		{ID: "..", Type: "y", Outcome: OutcomeSucceeded, Attempt: 1, MaxAttempts: 1, // stored before task.ValidateID refused it
			FinishedAt: time.UnixMilli(1700000000001).UTC(), Shard: -1},
		{ID: "z", Type: "..", Outcome: OutcomeSucceeded, Attempt: 1, MaxAttempts: 1, // stored before task.ValidateType refused it
			FinishedAt: time.UnixMilli(1700000000001).UTC(), Shard: -1},
		{ID: "z2", Type: "a/b", Outcome: OutcomeSucceeded, Attempt: 1, MaxAttempts: 1,
			FinishedAt: time.UnixMilli(1700000000001).UTC(), Shard: -1},
		{ID: "bridge-1", Type: "crm.sync", Outcome: OutcomeDelivered, Attempt: 1, MaxAttempts: 10,
			DueAt: time.UnixMilli(1700000000000).UTC(), FinishedAt: time.UnixMilli(1700000000050).UTC(), Shard: 2,
			FiredAt: time.UnixMilli(1700000000042).UTC(), Partition: 0, Offset: 0},
		{ID: "bridge-2", Type: "crm.sync", Outcome: OutcomeDelivered, Attempt: 2, MaxAttempts: 10,
			FinishedAt: time.UnixMilli(1700000000050).UTC(), Shard: 0,
			FiredAt: time.UnixMilli(1700000000042).UTC(), Partition: 11, Offset: 1 << 40},
	} {
		m := EncodeOutcome(o, "t")
		got, err := ParseOutcome(&m)
		if err != nil {
			t.Fatalf("%s: %v", m.Value, err)
		}
		if !reflect.DeepEqual(got, o) {
			t.Errorf("round trip\n got %+v\nwant %+v", got, o)
		}
	}
}

func TestEncodeOutcomeCutsError(t *testing.T) {
	o := sampleOutcome()
	o.Error = strings.Repeat("é", OutcomeErrorMax) // 2 bytes each: the cut falls inside one
	m := EncodeOutcome(o, "t")
	got, err := ParseOutcome(&m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Error) > OutcomeErrorMax || len(got.Error) < OutcomeErrorMax-1 || !utf8.ValidString(got.Error) {
		t.Errorf("error of %d bytes, valid UTF-8 %v", len(got.Error), utf8.ValidString(got.Error))
	}
}

func TestParseOutcomeRefuses(t *testing.T) {
	valid := func() map[string]any {
		return map[string]any{"id": "a", "type": "t", "outcome": "succeeded", "attempt": 1, "max_attempts": 3,
			"finished_at": "2026-01-02T03:04:05.678Z", "duration_ms": 5, "shard": 2}
	}
	enc := func(v map[string]any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	with := func(k string, val any) []byte {
		v := valid()
		if val == nil {
			delete(v, k)
		} else {
			v[k] = val
		}
		return enc(v)
	}
	withReceipt := func(firedAt string, partition, offset any) []byte {
		v := valid()
		v["outcome"], v["fired_at"], v["partition"], v["offset"] = OutcomeDelivered, firedAt, partition, offset
		return enc(v)
	}
	cases := []struct {
		name  string
		m     kafka.Message
		inErr string
	}{
		{"not JSON", kafka.Message{Value: []byte("nope")}, "not the expected JSON"},
		{"array", kafka.Message{Value: []byte("[]")}, "not the expected JSON"},
		{"trailing", kafka.Message{Value: append(enc(valid()), []byte(" {}")...)}, "data after"},
		{"no id", kafka.Message{Value: with("id", nil)}, "bad outcome id"},
		{"id with space", kafka.Message{Value: with("id", "a b")}, "bad outcome id"},
		{"no type", kafka.Message{Value: with("type", nil)}, "type"},
		{"bad outcome", kafka.Message{Value: with("outcome", "exploded")}, "unknown outcome"},
		{"no outcome", kafka.Message{Value: with("outcome", nil)}, "unknown outcome"},
		{"attempt", kafka.Message{Value: with("attempt", -1)}, "attempt"},
		{"attempt type", kafka.Message{Value: with("attempt", "1")}, "not the expected JSON"},
		{"max_attempts", kafka.Message{Value: with("max_attempts", 100000)}, "max_attempts"},
		{"duration", kafka.Message{Value: with("duration_ms", -5)}, "duration_ms"},
		{"shard", kafka.Message{Value: with("shard", -2)}, "shard"},
		{"finished_at missing", kafka.Message{Value: with("finished_at", nil)}, "finished_at"},
		{"due_at bad", kafka.Message{Value: with("due_at", "yesterday")}, "due_at"},
		{"key", kafka.Message{Key: []byte("b"), Value: enc(valid())}, "key"},
		{"outcome header", kafka.Message{Value: enc(valid()), Headers: hdrs("dq-outcome", "dead")}, "dq-outcome"},
		{"type header", kafka.Message{Value: enc(valid()), Headers: hdrs("dq-type", "u")}, "dq-type"},
		{"id header", kafka.Message{Value: enc(valid()), Headers: hdrs("dq-id", "b")}, "dq-id"},
		{"too large", kafka.Message{Value: make([]byte, OutcomeValueMax+1)}, "over the limit"},
		{"fired_at bad", kafka.Message{Value: with("fired_at", "soon")}, "fired_at"},
		{"fired_at before 1970", kafka.Message{Value: withReceipt("1969-12-31T23:59:59.999Z", 0, 0)}, "fired_at"},
		{"fired_at alone", kafka.Message{Value: with("fired_at", "2026-01-02T03:04:05.600Z")}, "without partition"},
		{"partition alone", kafka.Message{Value: with("partition", 0)}, "without fired_at"},
		{"offset alone", kafka.Message{Value: with("offset", 0)}, "without fired_at"},
		{"partition negative", kafka.Message{Value: withReceipt("2026-01-02T03:04:05.600Z", -1, 0)}, "partition"},
		{"offset negative", kafka.Message{Value: withReceipt("2026-01-02T03:04:05.600Z", 0, -1)}, "offset"},
		{"partition type", kafka.Message{Value: withReceipt("2026-01-02T03:04:05.600Z", "0", 0)}, "not the expected JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseOutcome(&c.m)
			if !IsHostile(err) || !strings.Contains(err.Error(), c.inErr) {
				t.Errorf("error %v, want a HostileError containing %q", err, c.inErr)
			}
		})
	}
	// unknown fields are ignored; the key and headers are optional
	v := valid()
	v["future_field"] = map[string]any{"x": 1}
	m := kafka.Message{Value: enc(v)}
	if o, err := ParseOutcome(&m); err != nil || o.ID != "a" || o.Duration != 5*time.Millisecond || !o.DueAt.IsZero() {
		t.Errorf("got %+v, %v", o, err)
	}
	// delivered, with its receipt at partition 0, offset 0
	m = kafka.Message{Key: []byte("a"), Value: withReceipt("2026-01-02T03:04:05.600+01:00", 0, 0), Headers: hdrs(HeaderOutcome, OutcomeDelivered)}
	o, err := ParseOutcome(&m)
	if err != nil || o.Outcome != OutcomeDelivered || !o.FiredAt.Equal(time.Date(2026, 1, 2, 2, 4, 5, 600e6, time.UTC)) ||
		o.FiredAt.Location() != time.UTC || o.Partition != 0 || o.Offset != 0 {
		t.Errorf("delivered: %+v, %v", o, err)
	}
}

// A delivered outcome writes its receipt (partition and offset 0
// included); an outcome without one writes none of its fields.
func TestEncodeOutcomeReceipt(t *testing.T) {
	o := &OutcomeRecord{ID: "bridge-1", Type: "crm.sync", Outcome: OutcomeDelivered, Attempt: 1, MaxAttempts: 10,
		DueAt: time.UnixMilli(1767323045678).UTC(), FinishedAt: time.UnixMilli(1767323045730).UTC(), Shard: 3,
		FiredAt: time.UnixMilli(1767323045720).UTC()}
	m := EncodeOutcome(o, "dq.outcomes")
	want := `{"id":"bridge-1","type":"crm.sync","outcome":"delivered","attempt":1,"max_attempts":10,` +
		`"due_at":"2026-01-02T03:04:05.678Z","finished_at":"2026-01-02T03:04:05.730Z","duration_ms":0,"shard":3,` +
		`"fired_at":"2026-01-02T03:04:05.720Z","partition":0,"offset":0}`
	if string(m.Value) != want {
		t.Errorf("value\n got %s\nwant %s", m.Value, want)
	}
	if !reflect.DeepEqual(m.Headers, hdrs("dq-id", "bridge-1", "dq-outcome", "delivered", "dq-type", "crm.sync")) {
		t.Errorf("headers %v", m.Headers)
	}
	// a receipt's numbers without its time are not written
	o.FiredAt, o.Partition, o.Offset = time.Time{}, 4, 9
	m = EncodeOutcome(o, "dq.outcomes")
	for _, k := range []string{"fired_at", "partition", "offset"} {
		if strings.Contains(string(m.Value), `"`+k+`"`) {
			t.Errorf("%s written without a receipt: %s", k, m.Value)
		}
	}
}

// FuzzParseOutcome: whatever is on the outcomes topic, ParseOutcome never
// panics, fails only with a HostileError, and what it accepts encodes
// back to a record it accepts with the same content.
func FuzzParseOutcome(f *testing.F) {
	good := EncodeOutcome(sampleOutcome(), "t")
	f.Add(good.Value, []byte("order-1"), "dead")
	f.Add([]byte(`{"id":"a","type":"t","outcome":"failed","attempt":1,"max_attempts":1,"finished_at":"2026-01-02T03:04:05Z","duration_ms":9223372036854775807,"shard":-1}`), []byte(nil), "")
	f.Add([]byte(`{"id":"a","type":"t","outcome":"cancelled","finished_at":"2026-01-02T03:04:05+02:00","due_at":"0001-01-01T00:00:00Z","headers":{}}`), []byte("a"), "cancelled")
	f.Add([]byte(`null`), []byte(nil), "")
	f.Add([]byte(`{"id":"\u0000"}`), []byte("x"), "x")
	f.Add([]byte(`{"id":"a","type":"t","outcome":"delivered","attempt":1,"max_attempts":1,"finished_at":"2026-01-02T03:04:05Z","duration_ms":0,"shard":0,"fired_at":"2026-01-02T03:04:04.999Z","partition":0,"offset":0}`), []byte("a"), "delivered")
	f.Fuzz(func(t *testing.T, value, key []byte, outcomeHeader string) {
		m := kafka.Message{Key: key, Value: value}
		if outcomeHeader != "" {
			m.Headers = hdrs(HeaderOutcome, outcomeHeader)
		}
		o, err := ParseOutcome(&m)
		if err != nil {
			if !IsHostile(err) {
				t.Fatalf("not a HostileError: %v", err)
			}
			return
		}
		again := EncodeOutcome(o, "t")
		o2, err := ParseOutcome(&again)
		if err != nil {
			t.Fatalf("re-encoded %s refused: %v", again.Value, err)
		}
		// times keep their millisecond; the error may be cut
		if o2.ID != o.ID || o2.Type != o.Type || o2.Outcome != o.Outcome || o2.Attempt != o.Attempt ||
			o2.Shard != o.Shard || len(o2.Headers) != len(o.Headers) ||
			!o2.FinishedAt.Equal(o.FinishedAt.Truncate(time.Millisecond)) ||
			!o2.FiredAt.Equal(o.FiredAt.Truncate(time.Millisecond)) || o2.Partition != o.Partition || o2.Offset != o.Offset {
			t.Fatalf("re-encoded differs:\n%+v\n%+v", o, o2)
		}
	})
}

// Forged: what EncodeOutcome writes passes; a task fired into the
// outcomes topic with an outcome as its payload (Encode) and a record
// without the dq-outcome marker do not, whatever their value says.
func TestForged(t *testing.T) {
	published := EncodeOutcome(sampleOutcome(), "dq.outcomes")
	if why := Forged(&published); why != "" {
		t.Errorf("a published outcome: %q", why)
	}
	tk := &task.Task{ID: "order-1", Type: "email.send", Payload: published.Value, PayloadJSON: true, Topic: "dq.outcomes",
		DueAt: time.UnixMilli(1767323045678), Attempt: 1, Gen: 1, Headers: map[string]string{"tenant": "acme"}}
	fired := Encode(tk, "dq.tasks", time.UnixMilli(1767323047001))
	if why := Forged(&fired); why != ForgedTaskRecord {
		t.Errorf("a fired task: %q, want %q", why, ForgedTaskRecord)
	}
	if _, err := ParseOutcome(&fired); err != nil {
		t.Errorf("the forgery's value parses as an outcome (what Forged is for): %v", err)
	}
	fired.Headers = append(fired.Headers, header(HeaderOutcome, OutcomeDead))
	if why := Forged(&fired); why != ForgedTaskRecord {
		t.Errorf("a fired task with a marker: %q, want %q", why, ForgedTaskRecord)
	}
	for _, hs := range [][]kafka.Header{nil, {header(HeaderID, "order-1"), header(HeaderType, "email.send")}, {header("DQ-Outcome", OutcomeDead)}} {
		m := kafka.Message{Key: published.Key, Value: published.Value, Headers: hs}
		if why := Forged(&m); why != ForgedUnmarked {
			t.Errorf("headers %v: %q, want %q", hs, why, ForgedUnmarked)
		}
	}
	// a task cannot carry the marker: task headers may not start with dq-
	tk.Headers = map[string]string{HeaderOutcome: OutcomeDead}
	if err := tk.Validate(); err == nil {
		t.Error("a task with a dq-outcome header validates")
	}
}
