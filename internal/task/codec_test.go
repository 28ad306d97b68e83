package task

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() *Task {
	return &Task{
		ID: "order-123", Type: "order.cancel", Payload: []byte(`{"order":123}`), PayloadJSON: true,
		DueAt: time.UnixMilli(1763859000123).UTC(), Topic: "orders.delayed", Key: "customer-7",
		Headers: map[string]string{"trace": "abc", "b": "2"}, MaxAttempts: 5, Timeout: 1500 * time.Millisecond, Priority: -3,
	}
}

func TestBodyRoundTrip(t *testing.T) {
	for _, in := range []*Task{sample(), {Type: "t"}} {
		b := EncodeBody(in)
		var out Task
		if err := DecodeBody(b, &out); err != nil {
			t.Fatalf("decode: %v", err)
		}
		in2 := *in
		in2.ID, in2.DueAt = "", time.Time{}
		if !reflect.DeepEqual(&in2, &out) {
			t.Fatalf("round trip:\n in %+v\nout %+v", in2, out)
		}
	}
}

func TestBodyDeterministic(t *testing.T) {
	a, b := EncodeBody(sample()), EncodeBody(sample())
	if !bytes.Equal(a, b) {
		t.Fatal("equal tasks encoded differently")
	}
}

func TestBodySizeFor64BytePayload(t *testing.T) {
	tk := &Task{Type: "order.cancel", Payload: bytes.Repeat([]byte("x"), 64)}
	if n := len(EncodeBody(tk)); n > 64+12+4 {
		t.Fatalf("body of a 64-byte payload is %d bytes", n)
	}
}

func TestDecodeBodyRejectsCorruption(t *testing.T) {
	good := EncodeBody(sample())
	for i := range len(good) {
		var out Task
		if err := DecodeBody(good[:i], &out); err == nil {
			t.Fatalf("truncated at %d: decoded without error", i)
		}
	}
	var out Task
	if err := DecodeBody(append(good, 0), &out); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if err := DecodeBody([]byte{9}, &out); err == nil {
		t.Fatal("unknown version accepted")
	}
}

func FuzzDecodeBody(f *testing.F) {
	f.Add(EncodeBody(sample()))
	f.Add(EncodeBody(&Task{Type: "x"}))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out Task
		if err := DecodeBody(b, &out); err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes (the encoding is canonical).
		if again := EncodeBody(&out); !bytes.Equal(again, b) {
			var o2 Task
			if err := DecodeBody(again, &o2); err != nil || !reflect.DeepEqual(o2, out) {
				t.Fatalf("re-encode differs and does not round trip: %v", err)
			}
		}
	})
}

func TestValidate(t *testing.T) {
	ok := sample()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid task rejected: %v", err)
	}
	cases := map[string]func(*Task){
		"empty id":               func(t *Task) { t.ID = "" },
		"long id":                func(t *Task) { t.ID = strings.Repeat("a", MaxIDLen+1) },
		"control in id":          func(t *Task) { t.ID = "a\x00b" },
		"space in id":            func(t *Task) { t.ID = "a b" },
		"no type":                func(t *Task) { t.Type = "" },
		"bad topic":              func(t *Task) { t.Topic = "a/b" },
		"dq header":              func(t *Task) { t.Headers = map[string]string{"dq-id": "x"} },
		"neg attempts":           func(t *Task) { t.MaxAttempts = -1 },
		"huge attempts":          func(t *Task) { t.MaxAttempts = MaxMaxAttempts + 1 },
		"neg timeout":            func(t *Task) { t.Timeout = -time.Second },
		"huge priority":          func(t *Task) { t.Priority = 5000 },
		"no due":                 func(t *Task) { t.DueAt = time.Time{} },
		"due year 20000":         func(t *Task) { t.DueAt = time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"due year 2300":          func(t *Task) { t.DueAt = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) },
		"due after max":          func(t *Task) { t.DueAt = MaxDueAt.Add(time.Millisecond) },
		"before 1970":            func(t *Task) { t.DueAt = time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC) },
		"timeout 1ns":            func(t *Task) { t.Timeout = time.Nanosecond },
		"timeout 999us":          func(t *Task) { t.Timeout = 999 * time.Microsecond },
		"key not utf-8":          func(t *Task) { t.Key = "k\xff" },
		"header value not utf-8": func(t *Task) { t.Headers = map[string]string{"h": "v\xfe"} },
		"header name not utf-8":  func(t *Task) { t.Headers = map[string]string{"h\xfe": "v"} },
		"type not utf-8":         func(t *Task) { t.Type = "t\xff" },
	}
	for name, mutate := range map[string]func(*Task){
		"due at max":  func(t *Task) { t.DueAt = MaxDueAt },
		"timeout 1ms": func(t *Task) { t.Timeout = time.Millisecond },
		"timeout 0":   func(t *Task) { t.Timeout = 0 },
	} {
		tk := sample()
		mutate(tk)
		if err := tk.Validate(); err != nil {
			t.Errorf("%s: rejected: %v", name, err)
		}
	}
	if got := MaxDueAt.Format("2006-01-02T15:04:05.000Z07:00"); got != MaxDueText {
		t.Errorf("MaxDueText %s, MaxDueAt %s", MaxDueText, got)
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			tk := sample()
			mutate(tk)
			if err := tk.Validate(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
