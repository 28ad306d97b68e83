package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/client"
)

// viaJSON is the embedded producer's former path for a task: the Go
// client's encoding, then the API's decoder. ok is false when the client
// refuses to encode it (a payload that is not JSON).
func viaJSON(t *testing.T, f *Fields, now time.Time) (sub submitOrError, ok bool) {
	t.Helper()
	ct := client.Task{ID: f.ID, Type: f.Type, Payload: f.Payload, PayloadBytes: f.PayloadBytes,
		DueAt: f.DueAt, Delay: f.Delay, Topic: f.Topic, Key: f.Key, Headers: f.Headers,
		MaxAttempts: f.MaxAttempts, Timeout: f.Timeout, Priority: f.Priority}
	b, err := ct.MarshalJSON()
	if err != nil {
		return submitOrError{}, false
	}
	s, e := DecodeTask(b, now)
	return submitOrError{s.Task, s.Delay, s.Relative, e}, true
}

type submitOrError struct {
	task     any
	delay    time.Duration
	relative bool
	err      *Error
}

func direct(f *Fields, now time.Time) submitOrError {
	s, e := NewTask(f, now)
	return submitOrError{s.Task, s.Delay, s.Relative, e}
}

// sameAnswer compares the two paths: the same error message, or equal
// tasks (a generated id aside).
func sameAnswer(t *testing.T, f *Fields, now time.Time) {
	t.Helper()
	want, ok := viaJSON(t, f, now)
	if !ok {
		return
	}
	got := direct(f, now)
	if (want.err == nil) != (got.err == nil) {
		t.Fatalf("%+v: JSON path %v, typed path %v", f, want.err, got.err)
	}
	if want.err != nil {
		if y := f.DueAt.Year(); y < 0 || y > 9999 {
			// the client cannot write such a year in RFC 3339: the API
			// says "not an RFC 3339 time", the typed path "out of range"
			want.err.Message, _, _ = strings.Cut(want.err.Message, ":")
			got.err.Message, _, _ = strings.Cut(got.err.Message, ":")
		}
		if *want.err != *got.err {
			t.Fatalf("%+v: JSON path %+v, typed path %+v", f, *want.err, *got.err)
		}
		return
	}
	wt, gt := reflect.ValueOf(want.task).Elem(), reflect.ValueOf(got.task).Elem()
	if f.ID == "" {
		if gt.FieldByName("ID").String() == "" {
			t.Fatalf("%+v: no id generated", f)
		}
		gt.FieldByName("ID").SetString(wt.FieldByName("ID").String())
	}
	if !reflect.DeepEqual(want.task, got.task) || want.delay != got.delay || want.relative != got.relative {
		t.Fatalf("%+v:\nJSON path  %+v delay %v relative %v\ntyped path %+v delay %v relative %v", f, want.task, want.delay, want.relative, got.task, got.delay, got.relative)
	}
}

func TestNewTaskMatchesJSON(t *testing.T) {
	now := fuzzNow
	at := time.Date(2030, 1, 2, 3, 4, 5, 678912345, time.FixedZone("x", 3600))
	for _, f := range []Fields{
		{Type: "order.cancel"},
		{ID: "order-1", Type: "order.cancel", Payload: []byte(` {"order": 1, "s": "\u00e9<&>"} `), Delay: 24 * time.Hour},
		{ID: "x", Type: "t", Payload: []byte(`[1,2,{"a":null}]`), DueAt: at, Topic: "orders", Key: "k", Headers: map[string]string{"trace": "abc"}, MaxAttempts: 5, Timeout: 30 * time.Second, Priority: -3},
		{Type: "t", Payload: []byte(`null`), PayloadBytes: []byte{0, 1, 2}},
		{Type: "t", PayloadBytes: []byte{}},
		{Type: "t", Headers: map[string]string{}},
		// refused, each with the API's message
		{ID: "a"},
		{ID: "..", Type: "t"},
		{Type: "has space"},
		{Type: "t", DueAt: at, Delay: -time.Hour},
		{Type: "t", Delay: -5 * time.Second},
		{Type: "t", Delay: 2000000 * time.Hour},
		{Type: "t", ID: strings.Repeat("i", 201)},
		{Type: "t", ID: "a\x00b"},
		{Type: "t", Payload: []byte(`{}`), PayloadBytes: []byte{0}},
		{Type: "t", Headers: map[string]string{"dq-id": "y"}},
		{Type: "t", Timeout: -time.Second},
		{Type: "t", Timeout: time.Microsecond},
		{Type: "t", DueAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Type: "t", DueAt: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)},
		{Type: "t", Priority: 1001},
		{Type: "t", MaxAttempts: -1},
	} {
		sameAnswer(t, &f, now)
	}
}

// A string that is not UTF-8 is refused naming its field (json.Marshal
// would have replaced its bytes), and so is a payload that is not JSON
// (the Go client refuses it before sending).
func TestNewTaskRefusesWhatJSONWouldRepair(t *testing.T) {
	bad := "a\xffb"
	for _, c := range []struct {
		f     Fields
		field string
	}{
		{Fields{ID: bad, Type: "t"}, "id:"},
		{Fields{Type: bad}, "type:"},
		{Fields{Type: "t", Topic: bad}, "topic:"},
		{Fields{Type: "t", Key: bad}, "key:"},
		{Fields{Type: "t", Headers: map[string]string{bad: "v"}}, "headers: name"},
		{Fields{Type: "t", Headers: map[string]string{"h": bad}}, "headers.h:"},
		{Fields{Type: "t", Payload: []byte(`"` + bad + `"`)}, "payload:"},
		{Fields{Type: "t", Payload: []byte(`"\ud800"`)}, "payload:"},
		{Fields{Type: "t", Payload: []byte(`{"a":`)}, "payload:"},
	} {
		_, e := NewTask(&c.f, fuzzNow)
		if e == nil || e.Status != 422 || !strings.HasPrefix(e.Message, c.field) {
			t.Errorf("%+v: %+v, want 422 naming %q", c.f, e, c.field)
		}
	}
}

// The task holds copies: the caller may reuse its buffers and map.
func TestNewTaskCopies(t *testing.T) {
	f := Fields{Type: "t", Payload: []byte(`{"a":1}`), Headers: map[string]string{"h": "v"}}
	s, e := NewTask(&f, fuzzNow)
	if e != nil {
		t.Fatal(e)
	}
	f.Payload[2] = 'b'
	f.Headers["h"] = "w"
	if string(s.Task.Payload) != `{"a":1}` || s.Task.Headers["h"] != "v" {
		t.Fatalf("task changed with the caller's values: %q %v", s.Task.Payload, s.Task.Headers)
	}
}

func FuzzNewTaskMatchesJSON(f *testing.F) {
	f.Add("order-1", "order.cancel", []byte(`{"order": 1}`), []byte(nil), false, int64(0), int64(24*time.Hour), "", "", "", "", 0, int64(0), 0)
	f.Add("", "t", []byte(` null `), []byte{0, 1}, true, int64(1893553445678), int64(0), "orders", "k", "trace", "abc", 5, int64(30*time.Second), -3)
	f.Add("x", "t", []byte(`"\u2028<&>"`), []byte(nil), false, int64(-1), int64(-5), "", "", "dq-id", "y", -1, int64(-1), 1001)
	f.Add("..", "has space", []byte(`{}`), []byte{}, true, int64(253402300800000), int64(1<<62), "", "", "", "", 0, int64(500), 0)
	f.Fuzz(func(t *testing.T, id, typ string, payload, bin []byte, binSet bool, dueMs, delay int64, topic, key, hk, hv string, maxAttempts int, timeout int64, priority int) {
		for _, s := range []string{id, typ, topic, key, hk, hv} {
			if !utf8.ValidString(s) {
				return // json.Marshal repairs it; the typed path refuses it (above)
			}
		}
		if len(payload) > 0 && !json.Valid(payload) {
			return // the Go client refuses it
		}
		fl := Fields{ID: id, Type: typ, Payload: payload, Delay: time.Duration(delay), Topic: topic, Key: key,
			MaxAttempts: maxAttempts, Timeout: time.Duration(timeout), Priority: priority}
		if binSet {
			fl.PayloadBytes = bin
			if fl.PayloadBytes == nil {
				fl.PayloadBytes = []byte{}
			}
		}
		if dueMs != 0 {
			fl.DueAt = time.UnixMilli(dueMs).Add(time.Duration(delay % 1e6))
		}
		if hk != "" {
			fl.Headers = map[string]string{hk: hv}
		}
		sameAnswer(t, &fl, fuzzNow)
	})
}
