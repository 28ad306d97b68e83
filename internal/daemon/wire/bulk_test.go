package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/task"
)

func TestDecodeBulk(t *testing.T) {
	for _, c := range []struct {
		body  string
		times bool
		ok    bool
		ids   int
		msg   string
	}{
		{body: `{"ids":["a","b"]}`, ok: true, ids: 2},
		{body: `{"ids":[]}`, ok: true},
		{body: `{"filter":{}}`, ok: true},
		{body: `{"filter":{"type":"t","due_after":"2030-01-01T00:00:00Z","due_before":null}}`, times: true, ok: true},
		{body: `{"filter":{"due_after":"2030-01-01T00:00:00Z"}}`, msg: "filter.due_after"},
		{body: `{"ids":["a"],"filter":{}}`, msg: "ids, filter"},
		{body: `{"ids":null}`, msg: "ids, filter"},
		{body: `{"ids":[" "]}`, msg: "ids[0]"},
		{body: `{"ids":["a","\udc00"]}`, msg: "ids[1]"},
		{body: `{"filter":{"type":""}}`, msg: "filter.type"},
		{body: `{"filter":{"Type":"x"}}`, msg: "filter.Type"},
		{body: `{"ids":["a"]} x`, msg: "trailing"},
	} {
		b, e := DecodeBulk([]byte(c.body), c.times)
		switch {
		case c.ok && e != nil:
			t.Errorf("%s: %v", c.body, e)
		case c.ok && len(b.IDs) != c.ids:
			t.Errorf("%s: ids %q", c.body, b.IDs)
		case !c.ok && (e == nil || !strings.Contains(e.Message, c.msg)):
			t.Errorf("%s: %v, want an error naming %q", c.body, e, c.msg)
		}
	}
}

// FuzzDecodeBulk: any body either fails with a 4xx or yields exactly one
// of ids and filter, each id valid.
func FuzzDecodeBulk(f *testing.F) {
	for _, s := range []string{`{"ids":["a","b"]}`, `{"filter":{"type":"t","due_after":"2030-01-01T00:00:00Z"}}`, `{"ids":["\ud800"]}`, `{}`, "{\"ids\":[\"\xff\"]}"} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, times bool) {
		out, e := DecodeBulk(b, times)
		if e != nil {
			if e.Status < 400 || e.Status > 499 || !utf8.ValidString(e.Code) {
				t.Fatalf("error %d %s", e.Status, e.Code)
			}
			return
		}
		if (out.IDs == nil) == (out.Filter == nil) {
			t.Fatalf("ids %v, filter %v", out.IDs, out.Filter)
		}
		for _, id := range out.IDs {
			if err := task.ValidateID(id); err != nil {
				t.Fatalf("id %q: %v", id, err)
			}
		}
		if out.Filter != nil && !times && (!out.Filter.DueAfter.IsZero() || !out.Filter.DueBefore.IsZero()) {
			t.Fatal("due times without times")
		}
	})
}
