package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/delayq/delayq/internal/redisstore"
)

// BenchmarkDecode measures the hand-written decoder against encoding/json
// on the bodies the API receives:
//
//	go test -run '^$' -bench BenchmarkDecode -benchtime 2s -count 3 ./internal/daemon/wire
//	GOEXPERIMENT=jsonv2 go test -run '^$' -bench BenchmarkDecode -benchtime 2s -count 3 ./internal/daemon/wire
//
// (the second adds encoding/json/v2, bench_jsonv2_test.go). Bodies: one
// task with a JSON object payload (POST /v1/tasks), the same with a
// binary payload_base64, and batches of 100 and 1000 such tasks (POST
// /v1/tasks/batch). Every decoder ends in the same task model with the
// same normalisation and validation (taskRequest.submit: id, due time,
// base64, timeout, task.Validate); a batch is decoded as the API does it,
// the envelope first, then each item on its own (one bad item is that
// item's error, not the batch's). ns/op is per body.
//
// The decoders do not all enforce the same policy. delayq's refuses
// invalid UTF-8 and unpaired \u surrogates (422 naming the field), field
// names that differ in case, and duplicate fields, and keeps the payload
// verbatim. encoding/json (Decoder with DisallowUnknownFields, then a
// check for trailing data) repairs invalid UTF-8 to U+FFFD, takes "Type"
// for "type" and the last of duplicate fields: it does less, so its
// figure is a lower bound of what the same policy would cost with it.
// encoding/json/v2 (RejectUnknownMembers) enforces all of it by default.
func BenchmarkDecode(b *testing.B) {
	for _, c := range benchBodies() {
		for _, d := range benchDecoders {
			b.Run(c.name+"/"+d.name, func(b *testing.B) {
				b.SetBytes(int64(len(c.body)))
				b.ReportAllocs()
				for b.Loop() {
					if c.batch {
						items, e := d.batch(c.body, 1000)
						if e != nil {
							b.Fatal(e)
						}
						for _, it := range items {
							if _, e := d.task(it, fuzzNow); e != nil {
								b.Fatal(e)
							}
						}
					} else if _, e := d.task(c.body, fuzzNow); e != nil {
						b.Fatal(e)
					}
				}
			})
		}
	}
}

// TestBenchDecodersAgree: on the benchmark's bodies every decoder of
// BenchmarkDecode yields the same tasks, so the figures compare the same
// work.
func TestBenchDecodersAgree(t *testing.T) {
	for _, c := range benchBodies() {
		var want []byte
		for _, d := range benchDecoders {
			items := [][]byte{c.body}
			if c.batch {
				var e *Error
				if items, e = d.batch(c.body, 1000); e != nil {
					t.Fatalf("%s/%s: %v", c.name, d.name, e)
				}
			}
			var got []byte
			for _, it := range items {
				sub, e := d.task(it, fuzzNow)
				if e != nil {
					t.Fatalf("%s/%s: %v", c.name, d.name, e)
				}
				got = fmt.Appendf(got, "%+v %s %v %v;", *sub.Task, sub.Task.Payload, sub.Delay, sub.Relative)
			}
			if want == nil {
				want = got
			} else if !bytes.Equal(got, want) {
				t.Fatalf("%s: %s decodes differently:\n%.300s\n%.300s", c.name, d.name, got, want)
			}
		}
	}
}

type benchDecoder struct {
	name  string
	task  func(b []byte, now time.Time) (redisstore.Submit, *Error)
	batch func(b []byte, maxBatch int) ([][]byte, *Error)
}

// benchDecoders are the decoders BenchmarkDecode compares
// (bench_jsonv2_test.go adds encoding/json/v2).
var benchDecoders = []benchDecoder{
	{"delayq", DecodeTask, DecodeBatch},
	{"encoding-json", stdDecodeTask, stdDecodeBatch},
}

// stdDecodeTask decodes one task with encoding/json into the same model.
func stdDecodeTask(b []byte, now time.Time) (redisstore.Submit, *Error) {
	var o oracleRequest
	if e := stdStrict(b, &o); e != nil {
		return redisstore.Submit{}, e
	}
	req := o.request()
	return req.submit(now)
}

// stdDecodeBatch decodes the batch envelope with encoding/json.
func stdDecodeBatch(b []byte, maxBatch int) ([][]byte, *Error) {
	var o struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if e := stdStrict(b, &o); e != nil {
		return nil, e
	}
	return benchItems(o.Tasks, maxBatch)
}

// benchItems checks the batch limit and returns the raw items.
func benchItems(tasks []json.RawMessage, maxBatch int) ([][]byte, *Error) {
	if len(tasks) > maxBatch {
		return nil, &Error{Status: 413, Code: CodeBatchTooLarge, Message: "tasks: too many"}
	}
	items := make([][]byte, len(tasks))
	for i, t := range tasks {
		items[i] = t
	}
	return items, nil
}

func stdStrict(b []byte, v any) *Error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return InvalidJSON(err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return InvalidJSON("trailing data after the value")
	}
	return nil
}

type benchBody struct {
	name  string
	body  []byte
	batch bool
}

func benchBodies() []benchBody {
	// A typical JSON payload (129 bytes) and, for payload_base64, 96
	// bytes of binary data.
	payload := `{"order_id":"ord-20260501-000123","customer":{"id":4711,"tier":"gold"},"items":[{"sku":"A-100","qty":2},{"sku":"B-7","qty":1}]}`
	bin := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0, 1, 0xfe, 0xff, 'x', 0x80}, 16))
	one := func(p string) string {
		return `{"id":"` + uuid.NewString() + `","type":"order.cancel",` + p +
			`,"delay":"24h","topic":"orders","headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`
	}
	batch := func(n int) []byte {
		items := make([]string, n)
		for i := range items {
			items[i] = one(`"payload":` + payload)
		}
		return []byte(`{"tasks":[` + strings.Join(items, ",") + `]}`)
	}
	return []benchBody{
		{"single", []byte(one(`"payload":` + payload)), false},
		{"single-base64", []byte(one(`"payload_base64":"` + bin + `"`)), false},
		{"batch100", batch(100), true},
		{"batch1000", batch(1000), true},
	}
}
