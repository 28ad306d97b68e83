package task

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestValidateID: a new task's id must be usable as the {id} path segment
// of the API; an id that may already be stored passes the older rule.
func TestValidateID(t *testing.T) {
	checkRule(t, "id", ValidateID, ValidateStoredID, func(id string) Task { return Task{ID: id, Type: "t", DueAt: time.UnixMilli(1)} }, []ruleCase{
		{v: "order-1", newOK: true, storedOK: true},
		{v: "a/b", newOK: true, storedOK: true},
		{v: "a/..", newOK: true, storedOK: true},
		{v: "./a", newOK: true, storedOK: true},
		{v: "a/", newOK: true, storedOK: true},
		{v: "//", newOK: true, storedOK: true},
		{v: "...", newOK: true, storedOK: true},
		{v: "%2E", newOK: true, storedOK: true},
		{v: "%", newOK: true, storedOK: true},
		{v: "?", newOK: true, storedOK: true},
		{v: "#", newOK: true, storedOK: true},
		{v: "é", newOK: true, storedOK: true},
		{v: ".", storedOK: true, wantMessage: `id: must not be "."`},
		{v: "..", storedOK: true, wantMessage: `id: must not be ".."`},
		{v: "/", storedOK: true, wantMessage: `id: must not be "/"`},
		{v: "", wantMessage: "id: must not be empty"},
		{v: "a b", wantMessage: "id: contains a control or white-space character"},
		{v: "a\x00", wantMessage: "id: contains a control or white-space character"},
		{v: "\xff", wantMessage: "id: not valid UTF-8"},
		{v: strings.Repeat("x", MaxIDLen+1), wantMessage: "id: longer than"},
		{v: strings.Repeat("x", MaxIDLen), newOK: true, storedOK: true},
	})
}

// TestValidateType: a new task's type must be usable as the {type} path
// segment of the pause and limit endpoints and as their etcd key; a type
// that may already be stored passes the older rule.
func TestValidateType(t *testing.T) {
	checkRule(t, "type", ValidateType, ValidateStoredType, func(typ string) Task { return Task{ID: "id", Type: typ, DueAt: time.UnixMilli(1)} }, []ruleCase{
		{v: "order.cancel", newOK: true, storedOK: true},
		{v: "...", newOK: true, storedOK: true},
		{v: ".a", newOK: true, storedOK: true},
		{v: "a..", newOK: true, storedOK: true},
		{v: "%2E", newOK: true, storedOK: true},
		{v: "%2F", newOK: true, storedOK: true},
		{v: "%", newOK: true, storedOK: true},
		{v: "?", newOK: true, storedOK: true},
		{v: "#", newOK: true, storedOK: true},
		{v: "é", newOK: true, storedOK: true},
		{v: ".", storedOK: true, wantMessage: `type: must not be "."`},
		{v: "..", storedOK: true, wantMessage: `type: must not be ".."`},
		{v: "/", storedOK: true, wantMessage: `type: must not be "/"`},
		{v: "a/b", newOK: true, storedOK: true},
		{v: "a/", newOK: true, storedOK: true},
		{v: "/a", newOK: true, storedOK: true},
		{v: "a/..", newOK: true, storedOK: true},
		{v: "//", newOK: true, storedOK: true},
		{v: "", wantMessage: "type: is required"},
		{v: "a b", wantMessage: "type: must be 1..200 printable"},
		{v: "a\x00", wantMessage: "type: must be 1..200 printable"},
		{v: "\xff", wantMessage: "type: must be 1..200 printable"},
		{v: strings.Repeat("x", MaxTypeLen+1), wantMessage: "type: must be 1..200 printable"},
		{v: strings.Repeat("x", MaxTypeLen), newOK: true, storedOK: true},
	})
}

// ruleCase is one value of a field checked by a new-task rule and its
// stored rule (ValidateID and ValidateStoredID, ValidateType and
// ValidateStoredType).
type ruleCase struct {
	v           string
	newOK       bool // the new-task rule, and Task.Validate
	storedOK    bool // the stored rule, and Task.ValidateStored
	wantMessage string
}

// checkRule checks each case against the field's two rules, and through
// Task.Validate and Task.ValidateStored of the task withField makes.
func checkRule(t *testing.T, field string, newRule, storedRule func(string) error, withField func(string) Task, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		err := newRule(tc.v)
		if (err == nil) != tc.newOK {
			t.Errorf("the new %s rule on %q = %v, want ok %v", field, tc.v, err, tc.newOK)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tc.wantMessage)) {
			t.Errorf("the new %s rule on %q = %q, want an ErrInvalid starting %q", field, tc.v, err, tc.wantMessage)
		}
		if err := storedRule(tc.v); (err == nil) != tc.storedOK {
			t.Errorf("the stored %s rule on %q = %v, want ok %v", field, tc.v, err, tc.storedOK)
		}
		tk := withField(tc.v)
		if err := tk.Validate(); (err == nil) != tc.newOK {
			t.Errorf("Validate with %s %q = %v, want ok %v", field, tc.v, err, tc.newOK)
		}
		if err := tk.ValidateStored(); (err == nil) != tc.storedOK {
			t.Errorf("ValidateStored with %s %q = %v, want ok %v", field, tc.v, err, tc.storedOK)
		}
	}
}

// ValidateKeyType is the rule of a type that names a per-type etcd key
// (pause, rate-limit rule): the stored-type rule and no "/".
func TestValidateKeyType(t *testing.T) {
	for _, typ := range []string{"mail", ".", "..", strings.Repeat("é", MaxTypeLen/2)} {
		if err := ValidateKeyType(typ); err != nil {
			t.Errorf("ValidateKeyType(%q): %v", typ, err)
		}
	}
	for typ, want := range map[string]string{
		"":                                "must not be empty",
		strings.Repeat("a", MaxTypeLen+1): "longer than 200 bytes",
		"a\xffb":                          "not valid UTF-8",
		"email/send":                      `"email/send": must not contain '/'`,
		"a b":                             `"a b": contains a control or white-space character (U+0020)`,
		"a\x00":                           "contains a control or white-space character (U+0000)",
	} {
		if err := ValidateKeyType(typ); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateKeyType(%q) = %v, want %q", typ, err, want)
		}
	}
}

// TestTruncateKeepsCharactersWhole: a cut never splits a UTF-8
// character, never exceeds n bytes (before the mark), and leaves bytes
// that are not UTF-8 cut where asked.
func TestTruncateKeepsCharactersWhole(t *testing.T) {
	cases := []struct {
		s    string
		n    int
		clip string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},                           // é is 2 bytes: cut before it
		{"a€b", 3, "a"},                          // € is 3 bytes
		{"a€b", 4, "a€"},                         // right after it
		{"𝄞𝄞", 7, "𝄞"},                           // 4-byte characters
		{"ab\x80\x80\x80\x80c", 4, "ab\x80\x80"}, // not UTF-8: cut as asked
		{"é", 0, ""},
	}
	for _, c := range cases {
		got := Clip(c.s, c.n)
		if got != c.clip {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.clip)
		}
		if len(got) > c.n {
			t.Errorf("Clip(%q, %d) = %q: over %d bytes", c.s, c.n, got, c.n)
		}
		want := c.clip
		if c.clip != c.s {
			want += "…"
		}
		if tr := Truncate(c.s, c.n); tr != want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.s, c.n, tr, want)
		}
	}
	// every cut of valid text is valid text
	s := strings.Repeat("aé€𝄞", 20)
	for n := range len(s) + 1 {
		if got := Clip(s, n); !utf8.ValidString(got) || !strings.HasPrefix(s, got) || len(got) < n-3 {
			t.Fatalf("Clip at %d: %q", n, got)
		}
	}
}
