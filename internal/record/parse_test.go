package record

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"

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

// parseRef is Parse as it was before session 31 (a map of the dq-*
// headers, a string per value): the reference FuzzParseSameAsMap holds
// Parse to.
//
// It reads and checks the dq-* headers of m, and that its value is at
// most maxPayload bytes (when maxPayload > 0). Any problem is a
// *HostileError with a short reason for the dead letter.
func parseRef(m *kafka.Message, maxPayload int) (*Fields, error) {
	if maxPayload > 0 && len(m.Value) > maxPayload {
		return nil, hostile("payload of %d bytes is over the limit of %d", len(m.Value), maxPayload)
	}
	if len(m.Headers) == 0 {
		return nil, hostile("no headers: not a delayq record")
	}
	if len(m.Headers) > task.MaxHeaders+16 {
		return nil, hostile("%d headers", len(m.Headers))
	}
	dq := map[string]string{}
	var own map[string]string
	for _, h := range m.Headers {
		if strings.HasPrefix(strings.ToLower(h.Key), "dq-") {
			if _, dup := dq[h.Key]; dup {
				return nil, hostile("header %s given twice", short(h.Key))
			}
			dq[h.Key] = string(h.Value)
			continue
		}
		if own == nil {
			own = map[string]string{}
		}
		own[h.Key] = string(h.Value)
	}
	r := &Fields{Headers: own, Shard: -1}
	var ok bool
	if r.ID, ok = dq[HeaderID]; !ok {
		return nil, hostile("no %s header", HeaderID)
	}
	if err := task.ValidateStoredID(r.ID); err != nil {
		return nil, hostile("bad %s header: %v", HeaderID, err)
	}
	if r.Type, ok = dq[HeaderType]; !ok || r.Type == "" || len(r.Type) > task.MaxTypeLen {
		return nil, hostile("missing or bad %s header", HeaderType)
	}
	var err error
	if r.Gen, err = parseUintRef(dq, HeaderGen, true); err != nil {
		return nil, err
	}
	att, err := parseUintRef(dq, HeaderAttempt, true)
	if err != nil {
		return nil, err
	}
	if att < 1 || att > task.MaxMaxAttempts {
		return nil, hostile("%s header %d out of range", HeaderAttempt, att)
	}
	r.Attempt = int(att)
	if r.DueAt, err = parseMillisRef(dq, HeaderDueAt, true); err != nil {
		return nil, err
	}
	if r.FiredAt, err = parseMillisRef(dq, HeaderFiredAt, false); err != nil {
		return nil, err
	}
	if v, ok := dq[HeaderShard]; ok {
		sh, err := strconv.Atoi(v)
		if err != nil || sh < 0 || sh >= 1<<16 {
			return nil, hostile("bad %s header %q", HeaderShard, short(v))
		}
		r.Shard = sh
	}
	to, err := parseUintRef(dq, HeaderTimeoutMS, false)
	if err != nil {
		return nil, err
	}
	if to > uint64(task.MaxTimeout.Milliseconds()) {
		return nil, hostile("%s header %d out of range", HeaderTimeoutMS, to)
	}
	r.Timeout = time.Duration(to) * time.Millisecond
	if _, err := parseUintRef(dq, HeaderMaxAttempts, false); err != nil {
		return nil, err
	}
	if p, ok := dq[HeaderPriority]; ok {
		if _, err := strconv.Atoi(p); err != nil {
			return nil, hostile("bad %s header %q", HeaderPriority, short(p))
		}
	}
	r.ContentType = dq[HeaderContentType]
	return r, nil
}

func parseUintRef(h map[string]string, name string, required bool) (uint64, error) {
	v, ok := h[name]
	if !ok {
		if required {
			return 0, hostile("no %s header", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, hostile("bad %s header %q", name, short(v))
	}
	return n, nil
}

func parseMillisRef(h map[string]string, name string, required bool) (time.Time, error) {
	n, err := parseUintRef(h, name, required)
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	if n > 253402300799999 { // 9999-12-31
		return time.Time{}, hostile("%s header %d out of range", name, n)
	}
	return task.FromMillis(int64(n)), nil
}

// Parse accepts and refuses exactly what the map-based parser it replaced
// did, with the same reasons and the same fields: header lists from lines
// "key=value" (keys in any case, duplicates, numbers with signs, spaces,
// underscores, overflow).
func FuzzParseSameAsMap(f *testing.F) {
	valid := ""
	for i := 0; i+1 < len(validHeaders); i += 2 {
		valid += validHeaders[i] + "=" + validHeaders[i+1] + "\n"
	}
	f.Add(valid, 10)
	f.Add(valid+"dq-gen=8\n", 10)
	f.Add(valid+"DQ-gen=8\ndq-shard=+5\n", 10)
	f.Add("dq-id=a\ndq-type=t\ndq-gen=1_0\ndq-attempt=1\ndq-due-at=1\n", 0)
	f.Add("dq-id=a\ndq-type=t\ndq-gen=18446744073709551616\ndq-attempt=1\ndq-due-at=1\n", 0)
	f.Add("dq-id=a\ndq-type=t\ndq-gen= 1\ndq-attempt=+1\ndq-due-at=0\ndq-priority=-0\ndq-shard=65536\n", 0)
	f.Add("Dq-Id=a\ndq-id=b\ndq-type=t\ndq-gen=1\ndq-attempt=1\ndq-due-at=1\ntenant=x\ntenant=y\n", 0)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, spec string, value int) {
		var hs []kafka.Header
		for line := range strings.Lines(spec) {
			k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
			hs = append(hs, kafka.Header{Key: k, Value: []byte(v)})
		}
		m := &kafka.Message{Headers: hs, Value: make([]byte, value&255)}
		got, gerr := Parse(m, 128)
		want, werr := parseRef(m, 128)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("headers %q: error %v, the map parser's %v", spec, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("headers %q: %+v, the map parser's %+v", spec, got, want)
		}
	})
}

// BenchmarkParse: one valid record's headers, the way a worker reads each
// record.
//
//	go test ./internal/record -run '^$' -bench BenchmarkParse -benchmem
func BenchmarkParse(b *testing.B) {
	m := &kafka.Message{Headers: hdrs(validHeaders...), Value: []byte("{}")}
	for _, c := range []struct {
		name  string
		parse func(*kafka.Message, int) (*Fields, error)
	}{{"positions", Parse}, {"map (before)", parseRef}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.parse(m, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
