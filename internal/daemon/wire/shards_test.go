package wire

import (
	"strings"
	"testing"
)

func TestDecodeGrow(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
		code string
		msg  string
	}{
		{`{"count": 64}`, 64, "", ""},
		{` {"count":4096} `, 4096, "", ""},
		{`{"count": 4097}`, 0, CodeInvalidShardCount, "count"},
		{`{"count": 0}`, 0, CodeInvalidShardCount, "count"},
		{`{"count": -8}`, 0, CodeInvalidShardCount, "count"},
		{`{"count": 1.5}`, 0, CodeInvalidShardCount, "count"},
		{`{"count": "64"}`, 0, CodeInvalidShardCount, "count"},
		{`{}`, 0, CodeInvalidShardCount, "count: required"},
		{`{"count": 64, "count": 128}`, 0, CodeInvalidJSON, "duplicate"},
		{`{"shards": 64}`, 0, CodeUnknownField, "shards"},
		{`[64]`, 0, CodeInvalidJSON, ""},
		{`{"count": 64} x`, 0, CodeInvalidJSON, ""},
		{``, 0, CodeInvalidJSON, ""},
	} {
		n, e := DecodeGrow([]byte(c.body))
		if c.code == "" {
			if e != nil || n != c.want {
				t.Errorf("%s: got %d, %v; want %d", c.body, n, e, c.want)
			}
			continue
		}
		if e == nil || e.Code != c.code || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: got %d, %v; want code %s naming %q", c.body, n, e, c.code, c.msg)
		}
	}
}

func FuzzDecodeGrow(f *testing.F) {
	for _, s := range []string{`{"count": 64}`, `{"count": -1}`, `{"count":"x"}`, `{}`, `[]`, `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, e := DecodeGrow(b)
		if e == nil && (n < 1 || n > 4096) {
			t.Fatalf("accepted count %d from %q", n, b)
		}
		if e != nil && (e.Status < 400 || e.Status > 499 || e.Message == "") {
			t.Fatalf("error %+v for %q", e, b)
		}
	})
}
