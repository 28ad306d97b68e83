package task

import (
	"errors"
	"strings"
	"testing"
	"time"
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
