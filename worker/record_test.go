package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func hdrs(kv ...string) []kafka.Header {
	var hs []kafka.Header
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

var validHeaders = []string{
	"dq-id", "order-1", "dq-type", "order.cancel", "dq-due-at", "1700000000123", "dq-fired-at", "1700000000200",
	"dq-attempt", "2", "dq-gen", "7", "dq-content-type", "application/json", "dq-max-attempts", "10",
	"dq-timeout-ms", "1500", "dq-priority", "-3", "tenant", "acme",
}

func TestParseRecordValid(t *testing.T) {
	m := &kafka.Message{Value: []byte(`{}`), Headers: hdrs(validHeaders...)}
	r, err := parseRecord(m, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := record{id: "order-1", typ: "order.cancel", gen: 7, attempt: 2,
		dueAt: time.UnixMilli(1700000000123).UTC(), firedAt: time.UnixMilli(1700000000200).UTC(),
		contentType: "application/json", timeout: 1500 * time.Millisecond}
	if r.id != want.id || r.typ != want.typ || r.gen != want.gen || r.attempt != want.attempt ||
		!r.dueAt.Equal(want.dueAt) || !r.firedAt.Equal(want.firedAt) || r.contentType != want.contentType ||
		r.timeout != want.timeout || r.headers["tenant"] != "acme" || len(r.headers) != 1 {
		t.Errorf("got %+v", r)
	}
	// the optional headers may be absent
	m = &kafka.Message{Headers: hdrs("dq-id", "a", "dq-type", "t", "dq-due-at", "1", "dq-attempt", "1", "dq-gen", "0")}
	if r, err := parseRecord(m, 0); err != nil || !r.firedAt.IsZero() || r.timeout != 0 {
		t.Errorf("minimal record: %+v, %v", r, err)
	}
}

func TestParseRecordHostile(t *testing.T) {
	with := func(k, v string) []kafka.Header {
		var kv []string
		for i := 0; i < len(validHeaders); i += 2 {
			if validHeaders[i] != k {
				kv = append(kv, validHeaders[i], validHeaders[i+1])
			}
		}
		if v != "<absent>" {
			kv = append(kv, k, v)
		}
		return hdrs(kv...)
	}
	for _, c := range []struct {
		name    string
		headers []kafka.Header
		value   int
		why     string
	}{
		{"no headers", nil, 0, "no headers"},
		{"no id", with("dq-id", "<absent>"), 0, "no dq-id"},
		{"empty id", with("dq-id", ""), 0, "bad dq-id"},
		{"control char id", with("dq-id", "a\x00b"), 0, "bad dq-id"},
		{"no type", with("dq-type", "<absent>"), 0, "dq-type"},
		{"no gen", with("dq-gen", "<absent>"), 0, "no dq-gen"},
		{"negative gen", with("dq-gen", "-1"), 0, "bad dq-gen"},
		{"hex gen", with("dq-gen", "0x10"), 0, "bad dq-gen"},
		{"huge gen", with("dq-gen", "99999999999999999999999"), 0, "bad dq-gen"},
		{"no attempt", with("dq-attempt", "<absent>"), 0, "no dq-attempt"},
		{"attempt 0", with("dq-attempt", "0"), 0, "out of range"},
		{"attempt huge", with("dq-attempt", "100000"), 0, "out of range"},
		{"no due", with("dq-due-at", "<absent>"), 0, "no dq-due-at"},
		{"due year 10000", with("dq-due-at", "253402300800000"), 0, "out of range"},
		{"bad fired", with("dq-fired-at", "yesterday"), 0, "bad dq-fired-at"},
		{"bad timeout", with("dq-timeout-ms", "1.5"), 0, "bad dq-timeout-ms"},
		{"timeout over a day", with("dq-timeout-ms", "86400001"), 0, "out of range"},
		{"bad max attempts", with("dq-max-attempts", "ten"), 0, "bad dq-max-attempts"},
		{"bad priority", with("dq-priority", "high"), 0, "bad dq-priority"},
		{"duplicate", append(with("dq-gen", "1"), kafka.Header{Key: "dq-gen", Value: []byte("2")}), 0, "given twice"},
		{"payload over limit", with("dq-gen", "1"), 101, "101 bytes is over the limit of 100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &kafka.Message{Headers: c.headers, Value: make([]byte, c.value)}
			_, err := parseRecord(m, 100)
			if err == nil || !isHostile(err) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("err %v, want a hostile error about %q", err, c.why)
			}
		})
	}
}

func TestDeadMessage(t *testing.T) {
	m := &kafka.Message{Topic: "dq.tasks", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("payload"),
		Headers: hdrs("dq-id", "a", "dq-attempt", "1", "dq-error", "old", "x", "y")}
	d := deadMessage(m, strings.Repeat("e", 2000), 3, time.UnixMilli(5000), 100)
	got := map[string][]string{}
	for _, h := range d.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	if len(got["dq-error"]) != 1 || len(got["dq-error"][0]) != 1024 || got["dq-attempt"][0] != "3" || len(got["dq-attempt"]) != 1 ||
		got["dq-dead-at"][0] != "5000" || got["dq-source-partition"][0] != "3" || got["dq-source-offset"][0] != "42" ||
		got["x"][0] != "y" || got["dq-id"][0] != "a" || string(d.Value) != "payload" || string(d.Key) != "k" || d.Topic != "" {
		t.Errorf("dead message %v value %q", got, d.Value)
	}
	d = deadMessage(m, "why", 0, time.UnixMilli(5000), 3)
	for _, h := range d.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	if d.Value != nil || got["dq-payload-bytes"][0] != "7" || got["dq-attempt"][1] != "1" {
		t.Errorf("dead message without value: %v %q", got, d.Value)
	}
}

// The header parser reads bytes we do not control: it must never panic,
// and whatever it accepts must be within the documented ranges.
func FuzzParseRecord(f *testing.F) {
	f.Add("order-1", "t", "7", "2", "1700000000123", "", []byte("{}"))
	f.Add("", "", "", "", "", "", []byte(nil))
	f.Add("a b", "x", "-1", "0", "1e3", "zz", []byte("x"))
	f.Fuzz(func(t *testing.T, id, typ, gen, attempt, due, timeout string, value []byte) {
		hs := hdrs("dq-id", id, "dq-type", typ, "dq-gen", gen, "dq-attempt", attempt, "dq-due-at", due)
		if timeout != "" {
			hs = append(hs, kafka.Header{Key: "dq-timeout-ms", Value: []byte(timeout)})
		}
		r, err := parseRecord(&kafka.Message{Headers: hs, Value: value}, 64)
		if err != nil {
			if !isHostile(err) {
				t.Fatalf("non-hostile error %v", err)
			}
			return
		}
		if r.id == "" || r.typ == "" || r.attempt < 1 || r.timeout < 0 || len(value) > 64 {
			t.Fatalf("accepted %+v", r)
		}
	})
}
