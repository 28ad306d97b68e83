package record

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

func TestParseValid(t *testing.T) {
	m := &kafka.Message{Value: []byte(`{}`), Headers: hdrs(validHeaders...)}
	r, err := Parse(m, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := Fields{ID: "order-1", Type: "order.cancel", Gen: 7, Attempt: 2,
		DueAt: time.UnixMilli(1700000000123).UTC(), FiredAt: time.UnixMilli(1700000000200).UTC(),
		ContentType: "application/json", Timeout: 1500 * time.Millisecond}
	if r.ID != want.ID || r.Type != want.Type || r.Gen != want.Gen || r.Attempt != want.Attempt ||
		!r.DueAt.Equal(want.DueAt) || !r.FiredAt.Equal(want.FiredAt) || r.ContentType != want.ContentType ||
		r.Timeout != want.Timeout || r.Headers["tenant"] != "acme" || len(r.Headers) != 1 {
		t.Errorf("got %+v", r)
	}
	// the optional headers may be absent
	m = &kafka.Message{Headers: hdrs("dq-id", "a", "dq-type", "t", "dq-due-at", "1", "dq-attempt", "1", "dq-gen", "0")}
	if r, err := Parse(m, 0); err != nil || !r.FiredAt.IsZero() || r.Timeout != 0 {
		t.Errorf("minimal record: %+v, %v", r, err)
	}
	// ids that new tasks may not have (task.ValidateID) but tasks stored
	// before may: their records are still delivered
	for _, id := range []string{"/", ".", ".."} {
		m = &kafka.Message{Headers: hdrs("dq-id", id, "dq-type", "t", "dq-due-at", "1", "dq-attempt", "1", "dq-gen", "0")}
		if r, err := Parse(m, 0); err != nil || r.ID != id {
			t.Errorf("record of id %q: %+v, %v", id, r, err)
		}
	}
	// likewise types that new tasks may not have (task.ValidateType), and
	// one with a "/" inside
	for _, typ := range []string{"/", ".", "..", "a/b"} {
		m = &kafka.Message{Headers: hdrs("dq-id", "x", "dq-type", typ, "dq-due-at", "1", "dq-attempt", "1", "dq-gen", "0")}
		if r, err := Parse(m, 0); err != nil || r.Type != typ {
			t.Errorf("record of type %q: %+v, %v", typ, r, err)
		}
	}
}

func TestParseHostile(t *testing.T) {
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
			_, err := Parse(m, 100)
			if err == nil || !IsHostile(err) || !strings.Contains(err.Error(), c.why) {
				t.Errorf("err %v, want a hostile error about %q", err, c.why)
			}
		})
	}
}

// The header parser reads bytes we do not control: it must never panic,
// and whatever it accepts must be within the documented ranges.
func FuzzParse(f *testing.F) {
	f.Add("order-1", "t", "7", "2", "1700000000123", "", []byte("{}"))
	f.Add("", "", "", "", "", "", []byte(nil))
	f.Add("a b", "x", "-1", "0", "1e3", "zz", []byte("x"))
	f.Fuzz(func(t *testing.T, id, typ, gen, attempt, due, timeout string, value []byte) {
		hs := hdrs("dq-id", id, "dq-type", typ, "dq-gen", gen, "dq-attempt", attempt, "dq-due-at", due)
		if timeout != "" {
			hs = append(hs, kafka.Header{Key: "dq-timeout-ms", Value: []byte(timeout)})
		}
		r, err := Parse(&kafka.Message{Headers: hs, Value: value}, 64)
		if err != nil {
			if !IsHostile(err) {
				t.Fatalf("non-hostile error %v", err)
			}
			return
		}
		if r.ID == "" || r.Type == "" || r.Attempt < 1 || r.Timeout < 0 || len(value) > 64 {
			t.Fatalf("accepted %+v", r)
		}
	})
}
