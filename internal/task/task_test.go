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
