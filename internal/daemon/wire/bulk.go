package wire

import (
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// MaxBulkIDs is the most ids one bulk request may name.
const MaxBulkIDs = 10000

// Bulk is the body of the bulk endpoints (POST /v1/tasks/cancel, POST
// /v1/dead/redrive, DELETE /v1/dead): either IDs or Filter, never both;
// the empty filter {} is how a request selects every task.
type Bulk struct {
	IDs    []string // nil when Filter is set
	Filter *Filter  // nil when IDs is set
}

// Filter selects tasks by type and due time ("" and zero times are open).
type Filter struct {
	Type      string
	DueAfter  time.Time // inclusive
	DueBefore time.Time // exclusive
}

// DecodeBulk decodes {"ids":[...]} or {"filter":{...}} (exactly one, with
// the strict policy of every body: unknown and duplicate fields are 400).
// With times false the filter takes only "type" (the dead set has no due
// times to filter by). Each id must pass task.ValidateStoredID (an id
// names a task that may have been stored before task.ValidateID refused
// it), the type ValidType (task.ValidateStoredType, for the same reason),
// the times RFC 3339; 422 invalid_task naming the field otherwise
// ("ids[3]", "filter.type").
func DecodeBulk(b []byte, times bool) (Bulk, *Error) {
	var out Bulk
	if e := scanOne(b); e != nil {
		return out, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return out, notObject(r, "request")
	}
	var seenIDs, seenFilter bool
	e := r.object(func(key []byte) *Error {
		switch string(key) {
		case "ids":
			if seenIDs {
				return duplicateField(key)
			}
			seenIDs = true
			return r.ids(&out.IDs)
		case "filter":
			if seenFilter {
				return duplicateField(key)
			}
			seenFilter = true
			return r.filter(&out.Filter, times)
		}
		return unknownField(key)
	})
	if e != nil {
		return Bulk{}, e
	}
	switch {
	case out.IDs != nil && out.Filter != nil:
		return Bulk{}, InvalidTask("ids, filter: set exactly one of them")
	case out.IDs == nil && out.Filter == nil:
		return Bulk{}, InvalidTask("ids, filter: set exactly one of them (an empty filter {} selects every task)")
	}
	return out, nil
}

// ids reads the "ids" array (null is absent; [] is an empty list).
func (r *reader) ids(p *[]string) *Error {
	if r.null() {
		return nil
	}
	if r.b[r.i] != '[' {
		e := typeError("ids", "an array of task ids", r)
		r.skip()
		return e
	}
	ids := make([]string, 0, 16)
	r.i = skipWS(r.b, r.i+1)
	for r.b[r.i] != ']' {
		if len(ids) == MaxBulkIDs {
			return InvalidTask(fmt.Sprintf("ids: more than %d ids, at most %d per request", MaxBulkIDs, MaxBulkIDs))
		}
		field := fmt.Sprintf("ids[%d]", len(ids))
		id, e := r.str(field)
		if e != nil {
			return e
		}
		if err := task.ValidateStoredID(id); err != nil {
			return InvalidTask(field + ": " + reason(err))
		}
		ids = append(ids, id)
		if r.i = skipWS(r.b, r.i); r.b[r.i] == ',' {
			r.i = skipWS(r.b, r.i+1)
		}
	}
	r.i++
	*p = ids
	return nil
}

// filter reads the "filter" object (null is absent).
func (r *reader) filter(p **Filter, times bool) *Error {
	if r.null() {
		return nil
	}
	if r.b[r.i] != '{' {
		e := typeError("filter", "an object", r)
		r.skip()
		return e
	}
	f := &Filter{}
	var seen [3]bool
	e := r.object(func(key []byte) *Error {
		k := -1
		switch string(key) {
		case "type":
			k = 0
		case "due_after":
			k = 1
		case "due_before":
			k = 2
		}
		if k < 0 || (k > 0 && !times) {
			return unknownField([]byte("filter." + string(key)))
		}
		if seen[k] {
			return duplicateField([]byte("filter." + string(key)))
		}
		seen[k] = true
		var s *string
		if e := r.optString("filter."+string(key), &s); e != nil || s == nil {
			return e
		}
		switch k {
		case 0:
			if err := ValidType(*s); err != nil {
				return InvalidTask("filter.type: " + err.Error())
			}
			f.Type = *s
		case 1, 2:
			name := "filter." + string(key)
			at, e := ParseTime(name, *s)
			if e != nil {
				return e
			}
			if k == 1 {
				f.DueAfter = at
			} else {
				f.DueBefore = at
			}
		}
		return nil
	})
	if e != nil {
		return e
	}
	*p = f
	return nil
}

// reason is a task validation error without its field name.
func reason(err error) string {
	var fe *task.FieldError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return err.Error()
}

// ValidType checks a task type that names tasks to act on (a list's or a
// bulk filter's type) with task.ValidateStoredType: 1..MaxTypeLen bytes of
// printable UTF-8 without white space, so tasks stored before
// task.ValidateType refused their type ("/", ".", "..") can still
// be found by it.
func ValidType(typ string) error {
	if err := task.ValidateStoredType(typ); err != nil {
		return fmt.Errorf("%s", reason(err))
	}
	return nil
}

// ParseTime parses an RFC 3339 time of a filter (field names it in the
// error), kept at millisecond precision like every stored time.
func ParseTime(field, s string) (time.Time, *Error) {
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !task.RFC3339Offset(s) {
		return time.Time{}, InvalidTask(fmt.Sprintf("%s: %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", field, task.Truncate(s, 64)))
	}
	return at.Truncate(time.Millisecond).UTC(), nil
}
