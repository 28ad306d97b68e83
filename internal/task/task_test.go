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
	for _, tc := range []struct {
		id          string
		newOK       bool // ValidateID
		storedOK    bool // ValidateStoredID
		wantMessage string
	}{
		{id: "order-1", newOK: true, storedOK: true},
		{id: "a/b", newOK: true, storedOK: true},
		{id: "a/..", newOK: true, storedOK: true},
		{id: "./a", newOK: true, storedOK: true},
		{id: "a/", newOK: true, storedOK: true},
		{id: "//", newOK: true, storedOK: true},
		{id: "...", newOK: true, storedOK: true},
		{id: "%2E", newOK: true, storedOK: true},
		{id: "%", newOK: true, storedOK: true},
		{id: "?", newOK: true, storedOK: true},
		{id: "#", newOK: true, storedOK: true},
		{id: "é", newOK: true, storedOK: true},
		{id: ".", storedOK: true, wantMessage: `id: must not be "."`},
		{id: "..", storedOK: true, wantMessage: `id: must not be ".."`},
		{id: "/", storedOK: true, wantMessage: `id: must not be "/"`},
		{id: "", wantMessage: "id: must not be empty"},
		{id: "a b", wantMessage: "id: contains a control or white-space character"},
		{id: "a\x00", wantMessage: "id: contains a control or white-space character"},
		{id: "\xff", wantMessage: "id: not valid UTF-8"},
		{id: strings.Repeat("x", MaxIDLen+1), wantMessage: "id: longer than"},
		{id: strings.Repeat("x", MaxIDLen), newOK: true, storedOK: true},
	} {
		err := ValidateID(tc.id)
		if (err == nil) != tc.newOK {
			t.Errorf("ValidateID(%q) = %v, want ok %v", tc.id, err, tc.newOK)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tc.wantMessage)) {
			t.Errorf("ValidateID(%q) = %q, want an ErrInvalid starting %q", tc.id, err, tc.wantMessage)
		}
		if err := ValidateStoredID(tc.id); (err == nil) != tc.storedOK {
			t.Errorf("ValidateStoredID(%q) = %v, want ok %v", tc.id, err, tc.storedOK)
		}
		tk := Task{ID: tc.id, Type: "t", DueAt: time.UnixMilli(1)}
		if err := tk.Validate(); (err == nil) != tc.newOK {
			t.Errorf("Validate with id %q = %v, want ok %v", tc.id, err, tc.newOK)
		}
		if err := tk.ValidateStored(); (err == nil) != tc.storedOK {
			t.Errorf("ValidateStored with id %q = %v, want ok %v", tc.id, err, tc.storedOK)
		}
	}
}

// TestValidateType: a new task's type must be usable as the {type} path
// segment of the pause and limit endpoints and as their etcd key; a type
// that may already be stored passes the older rule.
func TestValidateType(t *testing.T) {
	for _, tc := range []struct {
		typ         string
		newOK       bool // ValidateType
		storedOK    bool // ValidateStoredType
		wantMessage string
	}{
		{typ: "order.cancel", newOK: true, storedOK: true},
		{typ: "...", newOK: true, storedOK: true},
		{typ: ".a", newOK: true, storedOK: true},
		{typ: "a..", newOK: true, storedOK: true},
		{typ: "%2E", newOK: true, storedOK: true},
		{typ: "%2F", newOK: true, storedOK: true},
		{typ: "%", newOK: true, storedOK: true},
		{typ: "?", newOK: true, storedOK: true},
		{typ: "#", newOK: true, storedOK: true},
		{typ: "é", newOK: true, storedOK: true},
		{typ: ".", storedOK: true, wantMessage: `type: must not be "."`},
		{typ: "..", storedOK: true, wantMessage: `type: must not be ".."`},
		{typ: "/", storedOK: true, wantMessage: `type: must not be "/"`},
		{typ: "a/b", newOK: true, storedOK: true},
		{typ: "a/", newOK: true, storedOK: true},
		{typ: "/a", newOK: true, storedOK: true},
		{typ: "a/..", newOK: true, storedOK: true},
		{typ: "//", newOK: true, storedOK: true},
		{typ: "", wantMessage: "type: is required"},
		{typ: "a b", wantMessage: "type: must be 1..200 printable"},
		{typ: "a\x00", wantMessage: "type: must be 1..200 printable"},
		{typ: "\xff", wantMessage: "type: must be 1..200 printable"},
		{typ: strings.Repeat("x", MaxTypeLen+1), wantMessage: "type: must be 1..200 printable"},
		{typ: strings.Repeat("x", MaxTypeLen), newOK: true, storedOK: true},
	} {
		err := ValidateType(tc.typ)
		if (err == nil) != tc.newOK {
			t.Errorf("ValidateType(%q) = %v, want ok %v", tc.typ, err, tc.newOK)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tc.wantMessage)) {
			t.Errorf("ValidateType(%q) = %q, want an ErrInvalid starting %q", tc.typ, err, tc.wantMessage)
		}
		if err := ValidateStoredType(tc.typ); (err == nil) != tc.storedOK {
			t.Errorf("ValidateStoredType(%q) = %v, want ok %v", tc.typ, err, tc.storedOK)
		}
		tk := Task{ID: "id", Type: tc.typ, DueAt: time.UnixMilli(1)}
		if err := tk.Validate(); (err == nil) != tc.newOK {
			t.Errorf("Validate with type %q = %v, want ok %v", tc.typ, err, tc.newOK)
		}
		if err := tk.ValidateStored(); (err == nil) != tc.storedOK {
			t.Errorf("ValidateStored with type %q = %v, want ok %v", tc.typ, err, tc.storedOK)
		}
	}
}
