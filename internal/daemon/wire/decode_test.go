package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/jsonw"
	"github.com/delayq/delayq/internal/task"
)

var fuzzNow = time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)

func TestDecodeTask(t *testing.T) {
	now := fuzzNow
	t.Run("payload kept byte for byte", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"type":"x","payload": { "b" : [1, 2.50, "\u00e9<>"] } }`), now)
		if e != nil {
			t.Fatal(e)
		}
		if got := string(sub.Task.Payload); got != `{ "b" : [1, 2.50, "\u00e9<>"] }` || !sub.Task.PayloadJSON {
			t.Fatalf("payload %q json=%v", got, sub.Task.PayloadJSON)
		}
	})
	t.Run("null payload is no payload", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"type":"x","payload":null}`), now)
		if e != nil || sub.Task.Payload != nil || sub.Task.PayloadJSON {
			t.Fatalf("%+v %v", sub.Task, e)
		}
	})
	t.Run("binary payload", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"type":"x","payload_base64":"AP8="}`), now)
		if e != nil || !bytes.Equal(sub.Task.Payload, []byte{0, 255}) || sub.Task.PayloadJSON {
			t.Fatalf("%+v %v", sub.Task, e)
		}
	})
	t.Run("neither due_at nor delay is now on Redis' clock", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"type":"x"}`), now)
		if e != nil || !sub.Relative || sub.Delay != 0 || !sub.Task.DueAt.Equal(now.Truncate(time.Millisecond)) {
			t.Fatalf("%+v %v", sub, e)
		}
	})
	t.Run("delay is relative", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"type":"x","delay":"90s"}`), now)
		if e != nil || !sub.Relative || sub.Delay != 90*time.Second || !sub.Task.DueAt.Equal(now.Add(90*time.Second).Truncate(time.Millisecond)) {
			t.Fatalf("%+v %v", sub, e)
		}
	})
	t.Run("due_at is absolute at ms precision", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"type":"x","due_at":"2030-01-02T03:04:05.678999+02:00"}`), now)
		want := time.Date(2030, 1, 2, 1, 4, 5, 678e6, time.UTC)
		if e != nil || sub.Relative || !sub.Task.DueAt.Equal(want) || sub.Task.DueAt.Location() != time.UTC {
			t.Fatalf("%+v %v", sub, e)
		}
	})
	t.Run("every field", func(t *testing.T) {
		sub, e := DecodeTask([]byte(`{"id":"a-1","type":"t","topic":"tp","key":"k","headers":{"h":"v"},"max_attempts":3,"timeout":"2s","priority":-7}`), now)
		if e != nil {
			t.Fatal(e)
		}
		want := task.Task{ID: "a-1", Type: "t", Topic: "tp", Key: "k", Headers: map[string]string{"h": "v"},
			MaxAttempts: 3, Timeout: 2 * time.Second, Priority: -7, DueAt: now.Truncate(time.Millisecond).UTC()}
		if !reflect.DeepEqual(*sub.Task, want) {
			t.Fatalf("got  %+v\nwant %+v", *sub.Task, want)
		}
	})
}

func TestReaderEdgeCases(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"x","payload":{"type":1,"zz":[{"a":"}"}]},"delay":"1s"}`: "",
		`{"type":"x","payload":"\"zz\":1","Delay":"1s"}`:                  CodeUnknownField,
		` { "type" : "x" , "type" : "y" } `:                               CodeInvalidJSON, //nolint:gocritic // mapKey: the whitespace around the JSON is the case under test
		`{"\u0074ype":"x","type":"y"}`:                                    CodeInvalidJSON,
		`{"payload":[1,{"x":"]"}],"type":"x"}`:                            "",
		`{"type":"x","headers":{"a":null,"a":"b"}}`:                       "",
		`{"type":"x"}` + "\n\t ":                                          "",
		`{"type":"x"}x`:                                                   CodeInvalidJSON,
		`{"type":"x","priority":1e2}`:                                     CodeInvalidTask,
		`{"type":"x","priority":99999999999999999999}`:                    CodeInvalidTask,
		`{"type":"x","payload":01}`:                                       CodeInvalidJSON,
		`{"type":"x","payload":[1,]}`:                                     CodeInvalidJSON,
		`{"type":"x","payload":"\x"}`:                                     CodeInvalidJSON,
		`{"type":"x","payload":"a` + "\x01" + `"}`:                        CodeInvalidJSON,
		`{"type":"x","payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`: CodeInvalidJSON,
		`{"type":"x","payload":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`:   "",
	} {
		_, e := readTask([]byte(body))
		got := ""
		if e != nil {
			got = e.Code
		}
		if got != want {
			t.Errorf("%.80s: %q, want %q (%v)", body, got, want, e)
		}
	}
}

// oracleRequest and oracleReadTask decode a task the slow way, with
// encoding/json (DisallowUnknownFields) plus the exact-name and duplicate
// rules: the reference the daemon's reader must agree with.
type oracleRequest struct {
	ID            *string           `json:"id"`
	Type          string            `json:"type"`
	Payload       json.RawMessage   `json:"payload"`
	PayloadBase64 *string           `json:"payload_base64"`
	DueAt         *string           `json:"due_at"`
	Delay         *string           `json:"delay"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Headers       map[string]string `json:"headers"`
	MaxAttempts   int               `json:"max_attempts"`
	Timeout       *string           `json:"timeout"`
	Priority      int               `json:"priority"`
}

func oracleStrict(b []byte, v any, known ...string) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(v) != nil {
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		return false
	}
	// exact names, no duplicates
	dec = json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k := tok.(string)
		if seen[k] || !slices.Contains(known, k) {
			return false
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return true
}

func oracleReadTask(b []byte) (taskRequest, bool) {
	var o oracleRequest
	if !oracleStrict(b, &o, "id", "type", "payload", "payload_base64", "due_at", "delay", "topic", "key", "headers", "max_attempts", "timeout", "priority") {
		return taskRequest{}, false
	}
	return o.request(), true
}

// request is the taskRequest encoding/json decoded.
func (o *oracleRequest) request() taskRequest {
	req := taskRequest{ID: o.ID, Type: o.Type, PayloadBase64: o.PayloadBase64, DueAt: o.DueAt, Delay: o.Delay,
		Topic: o.Topic, Key: o.Key, Headers: o.Headers, MaxAttempts: o.MaxAttempts, Timeout: o.Timeout, Priority: o.Priority}
	if len(o.Payload) > 0 && string(o.Payload) != "null" {
		req.Payload = o.Payload
	}
	return req
}

func oracleBatch(b []byte) ([]json.RawMessage, bool) {
	var o struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if !oracleStrict(b, &o, "tasks") || o.Tasks == nil {
		return nil, false
	}
	return o.Tasks, true
}

// repaired reports whether encoding/json's decoding of a request holds a
// U+FFFD (possibly a repair of invalid UTF-8) or a payload it would
// repair.
func repaired(o taskRequest) bool {
	for _, s := range requestStrings(o) {
		if strings.ContainsRune(s, utf8.RuneError) {
			return true
		}
	}
	return o.Payload != nil && payloadRepaired(o.Payload)
}

// validRequest reports whether every string of a decoded request is valid
// UTF-8 and its payload decodes (with encoding/json) without a repair.
func validRequest(r taskRequest) bool {
	for _, s := range requestStrings(r) {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return r.Payload == nil || !payloadRepaired(r.Payload)
}

func requestStrings(r taskRequest) []string {
	strs := []string{r.Type, r.Topic, r.Key}
	for _, p := range []*string{r.ID, r.PayloadBase64, r.DueAt, r.Delay, r.Timeout} {
		if p != nil {
			strs = append(strs, *p)
		}
	}
	for k, v := range r.Headers {
		strs = append(strs, k, v)
	}
	return strs
}

// payloadRepaired reports whether encoding/json would repair the JSON
// text raw: it is not valid UTF-8, or a string decodes to a U+FFFD that
// raw neither holds nor escapes as \ufffd (a replaced lone surrogate).
func payloadRepaired(raw []byte) bool {
	if !utf8.Valid(raw) {
		return true
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	has := false
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			has = has || strings.ContainsRune(x, utf8.RuneError)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				has = has || strings.ContainsRune(k, utf8.RuneError)
				walk(e)
			}
		}
	}
	walk(v)
	return has && !bytes.ContainsRune(raw, utf8.RuneError) && !bytes.Contains(bytes.ToLower(raw), []byte(`\ufffd`))
}

// encodeRequest writes t back as a POST /v1/tasks body with an explicit
// id and absolute due time.
func encodeRequest(t *task.Task) []byte {
	var b bytes.Buffer
	b.WriteString(`{"id":`)
	b.Write(jsonw.AppendString(nil, t.ID))
	b.WriteString(`,"type":`)
	b.Write(jsonw.AppendString(nil, t.Type))
	b.WriteString(`,"due_at":"` + FormatTime(t.DueAt) + `"`)
	if t.PayloadJSON {
		b.WriteString(`,"payload":`)
		b.Write(t.Payload)
	} else if t.Payload != nil {
		b.WriteString(`,"payload_base64":"` + base64.StdEncoding.EncodeToString(t.Payload) + `"`)
	}
	rest, _ := json.Marshal(map[string]any{"topic": t.Topic, "key": t.Key, "headers": t.Headers,
		"max_attempts": t.MaxAttempts, "timeout": t.Timeout.String(), "priority": t.Priority})
	b.WriteByte(',')
	b.Write(rest[1:])
	return b.Bytes()
}

// FuzzDecodeTask feeds arbitrary bodies to every request decoder. Nothing
// may panic; every refusal is a 400 or 422 with a code and a message;
// whatever decodes passes task.Validate, keeps a JSON payload byte for
// byte, and comes out the same when written back as a request. (That it
// comes out of the daemon's journal the same is the daemon's
// FuzzJournalRoundTrip.)
func FuzzDecodeTask(f *testing.F) {
	seeds := []string{
		// valid
		`{"type":"order.cancel"}`,
		`{"id":"order-1","type":"order.cancel","payload":{"order": 1},"delay":"24h"}`,
		`{"id":"x","type":"t","payload":[1,2,{"a":null}],"due_at":"2030-01-02T03:04:05.678Z","topic":"orders","key":"k","headers":{"trace":"abc"},"max_attempts":5,"timeout":"30s","priority":-3}`,
		`{"type":"t","payload":"a string","delay":"0s"}`,
		`{"type":"t","payload":12.50e3}`,
		`{"type":"t","payload":null,"payload_base64":"AAEC"}`,
		`{"type":"t","payload_base64":""}`,
		`{"type":"t","payload":"\u2028<&>","id":"é"}`,
		`{"tasks":[{"type":"t"},{"type":""}]}`,
		`{"delay":"1h"}`,
		`{"due_at":"2030-01-02T03:04:05Z"}`,
		// bad: one of each documented case
		`{"type":`,
		``,
		`[1]`,
		`"x"`,
		`{"type":"x"} {}`,
		`{"type":"x","dely":"1h"}`,
		`{"Type":"x"}`,
		`{"type":"x","type":"y"}`,
		`{"\u0074ype":"x","type":"y"}`,
		`{"id":"a"}`,
		`{"type":"x","due_at":"tomorrow"}`,
		`{"type":"x","due_at":"2030-01-02T15:04:05Z","delay":"1h"}`,
		`{"type":"x","delay":"-5s"}`,
		`{"type":"x","delay":"9999999h"}`,
		`{"type":"x","id":"` + strings.Repeat("i", 201) + `"}`,
		`{"type":"x","id":"a\u0000b"}`,
		`{"type":"x","id":""}`,
		`{"type":"x","payload":{},"payload_base64":"AA=="}`,
		`{"type":"x","payload_base64":"!!"}`,
		`{"type":"x","headers":{"dq-id":"y"}}`,
		`{"type":"x","priority":"high"}`,
		`{"type":"x","max_attempts":1e400}`,
		`{"type":"x","timeout":"-1s"}`,
		`{"type":"x","due_at":"10000-01-01T00:00:00Z"}`,
		`{"tasks":{}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		"{\"type\":\"x\",\"id\":\"adv-col-\xff\"}",
		"{\"type\":\"x\",\"key\":\"k\xfe\",\"headers\":{\"h\xc3\":\"v\"}}",
		"{\"type\":\"x\",\"headers\":{\"h\":\"v\xed\xa0\x80\"}}",
		"{\"type\":\"x\",\"payload\":{\"a\":[\"\xff\"]}}",
		`{"type":"x","payload":"\ud83d\ude00 \\ud800"}`,
		`{"type":"x","payload":"\ud800"}`,
		`{"type":"x","payload":"\udc00\ud800"}`,
		`{"type":"x","id":"a\ud800b"}`,
		`{"type":"x","timeout":"1ns"}`,
		`{"type":"x","due_at":"2030-01-02T03:04:05+24:00"}`,
		`{"type":"x","due_at":"2248-09-26T15:10:22.208Z"}`,
		`{"type":"x","delay":"2000000h"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The reader agrees with encoding/json, except that it refuses a
		// string encoding/json would repair to U+FFFD.
		got, e1 := readTask(b)
		want, ok := oracleReadTask(b)
		switch {
		case e1 != nil && ok:
			if e1.Status != 422 || !strings.Contains(e1.Message, "not valid UTF-8") || !repaired(want) {
				t.Fatalf("reader refuses (%v) what encoding/json accepts without repairing it: %#v", e1, want)
			}
		case (e1 == nil) != ok:
			t.Fatalf("reader accepts=%v (%v), encoding/json accepts=%v", e1 == nil, e1, ok)
		case ok && !reflect.DeepEqual(got, want):
			t.Fatalf("reader and encoding/json differ:\n%#v\n%#v", got, want)
		}
		// What the reader accepts is valid UTF-8 after decoding.
		if e1 == nil && !validRequest(got) {
			t.Fatalf("reader accepted text that is not valid UTF-8: %#v", got)
		}
		items, e2 := DecodeBatch(b, 10)
		oitems, ok := oracleBatch(b)
		switch {
		case ok && len(oitems) > 10:
			if e2 == nil || e2.Code != CodeBatchTooLarge {
				t.Fatalf("batch of %d: %v", len(oitems), e2)
			}
		case (e2 == nil) != ok:
			t.Fatalf("batch: reader accepts=%v (%v), encoding/json accepts=%v", e2 == nil, e2, ok)
		case ok:
			if len(items) != len(oitems) {
				t.Fatalf("batch: %d items, encoding/json %d", len(items), len(oitems))
			}
			for i := range items {
				if !bytes.Equal(items[i], oitems[i]) {
					t.Fatalf("batch item %d: %q vs %q", i, items[i], oitems[i])
				}
			}
		}

		checkRefusal := func(what string, e *Error) {
			t.Helper()
			if (e.Status != 400 && e.Status != 422 && e.Status != 413) || e.Code == "" || e.Message == "" {
				t.Fatalf("%s: bad refusal %+v", what, e)
			}
		}
		if _, e := DecodeReschedule(b, fuzzNow); e != nil {
			checkRefusal("reschedule", e)
		}
		if _, e := DecodeBatch(b, 10); e != nil {
			checkRefusal("batch", e)
		}
		sub, e := DecodeTask(b, fuzzNow)
		if e != nil {
			if e.Status == 413 {
				t.Fatalf("task: 413 from the task decoder: %+v", e)
			}
			checkRefusal("task", e)
			return
		}
		tk := sub.Task
		if err := tk.Validate(); err != nil {
			t.Fatalf("decoded task fails validation: %v", err)
		}
		if sub.Delay < 0 || (sub.Relative && !tk.DueAt.Equal(fuzzNow.Add(sub.Delay).Truncate(time.Millisecond))) {
			t.Fatalf("due: %+v", sub)
		}
		if tk.DueAt.Nanosecond()%int(time.Millisecond) != 0 {
			t.Fatalf("due_at below ms precision: %v", tk.DueAt)
		}
		if tk.PayloadJSON && (!json.Valid(tk.Payload) || !bytes.Contains(b, tk.Payload)) {
			t.Fatalf("JSON payload %q is not verbatim valid JSON", tk.Payload)
		}
		// Written back as a request, it decodes to the same task.
		again, e := DecodeTask(encodeRequest(tk), fuzzNow)
		if e != nil {
			t.Fatalf("re-decode of %s: %v", encodeRequest(tk), e)
		}
		if !bytes.Equal(task.EncodeBody(again.Task), task.EncodeBody(tk)) || !again.Task.DueAt.Equal(tk.DueAt) || again.Task.ID != tk.ID {
			t.Fatalf("round trip differs:\n%+v\n%+v", tk, again.Task)
		}
	})
}

// TestDecodeStrictInput: strings that are not valid UTF-8 (raw bytes or
// unpaired surrogate escapes) are refused naming the field, not repaired
// to U+FFFD (which made "adv-col-\xff" and "adv-col-\xfe" one id); due
// times past what the due score holds, sub-millisecond timeouts and
// offsets that are not RFC 3339 are refused.
func TestDecodeStrictInput(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{"{\"type\":\"x\",\"id\":\"adv-col-\xff\"}", "id:"},
		{"{\"type\":\"x\",\"id\":\"adv-col-\xfe\"}", "id:"},
		{`{"type":"x","id":"adv-col-\ud800"}`, "id:"},
		{"{\"type\":\"t\xff\"}", "type:"},
		{"{\"type\":\"x\",\"topic\":\"t\xff\"}", "topic:"},
		{"{\"type\":\"x\",\"key\":\"k\xc3\"}", "key:"},
		{`{"type":"x","key":"k\udc00"}`, "key:"},
		{"{\"type\":\"x\",\"headers\":{\"h\xff\":\"v\"}}", "headers:"},
		{"{\"type\":\"x\",\"headers\":{\"h\":\"v\xff\"}}", "headers.h:"},
		{`{"type":"x","headers":{"h":"\ud800\u0041"}}`, "headers.h:"},
		{"{\"type\":\"x\",\"payload\":\"a\xffb\"}", "payload:"},
		{"{\"type\":\"x\",\"payload\":{\"k\xfe\":1}}", "payload:"},
		{`{"type":"x","payload":["ok","\ud800"]}`, "payload:"},
		{`{"type":"x","payload":"\udc00\ud800"}`, "payload:"},
		{`{"type":"x","payload":"\ud83d"}`, "payload:"},
		{"{\"type\":\"x\",\"due_at\":\"2030-01-02T03:04:05\xffZ\"}", "due_at:"},
		{`{"type":"x","due_at":"2300-01-01T00:00:00Z"}`, "due_at:"},
		{`{"type":"x","due_at":"9999-12-31T23:59:59Z"}`, "due_at:"},
		{`{"type":"x","due_at":"2248-09-26T15:10:22.208Z"}`, "due_at:"},
		{`{"type":"x","due_at":"1969-12-31T23:59:59Z"}`, "due_at:"},
		{`{"type":"x","due_at":"2030-01-02T03:04:05+24:00"}`, "due_at:"},
		{`{"type":"x","due_at":"2030-01-02T03:04:05-24:00"}`, "due_at:"},
		{`{"type":"x","delay":"2000000h"}`, "delay:"},
		{`{"type":"x","timeout":"1ns"}`, "timeout:"},
		{`{"type":"x","timeout":"999us"}`, "timeout:"},
	} {
		_, e := DecodeTask([]byte(c.body), fuzzNow)
		if e == nil || e.Status != 422 || e.Code != CodeInvalidTask || !strings.HasPrefix(e.Message, c.field) {
			t.Errorf("%q: %+v, want 422 naming %s", c.body, e, c.field)
		}
	}
	for _, body := range []string{
		`{"type":"x","id":"adv-col-\u00ff","payload":"\ud83d\ude00 \\ud800 \ufffd"}`,
		"{\"type\":\"x\",\"id\":\"adv-col-\xc3\xbf\",\"headers\":{\"h\xc3\xa9\":\"\xe2\x82\xac\"}}",
		`{"type":"x","due_at":"2248-09-26T15:10:22.207Z"}`,
		`{"type":"x","due_at":"2248-09-26T17:10:22.207+02:00"}`,
		`{"type":"x","due_at":"2030-01-02T03:04:05+23:59"}`,
		`{"type":"x","due_at":"2030-01-02T03:04:05-00:00"}`,
		`{"type":"x","timeout":"1ms"}`,
		`{"type":"x","timeout":"0s"}`,
	} {
		if _, e := DecodeTask([]byte(body), fuzzNow); e != nil {
			t.Errorf("%s: %v", body, e)
		}
	}
	// The messages state the latest accepted time.
	for _, body := range []string{`{"type":"x","due_at":"2300-01-01T00:00:00Z"}`, `{"type":"x","delay":"2000000h"}`} {
		if _, e := DecodeTask([]byte(body), fuzzNow); e == nil || !strings.Contains(e.Message, task.MaxDueText) {
			t.Errorf("%s: %v, want the latest accepted time", body, e)
		}
	}
	// PATCH takes the same due rules.
	for body, ok := range map[string]bool{
		`{"due_at":"2248-09-26T15:10:22.207Z"}`:  true,
		`{"due_at":"2248-09-26T15:10:22.208Z"}`:  false,
		`{"due_at":"2030-01-02T03:04:05+24:00"}`: false,
		`{"delay":"2000000h"}`:                   false,
		"{\"delay\":\"1s\xff\"}":                 false,
	} {
		_, e := DecodeReschedule([]byte(body), fuzzNow)
		if (e == nil) != ok || (e != nil && e.Status != 422) {
			t.Errorf("reschedule %q: %v", body, e)
		}
	}
}
