package worker

import (
	"encoding/json"
	"fmt"
)

// JSON decodes t's payload, a JSON value, into a T: a struct, a map, a
// slice or any type encoding/json decodes into. Fields the payload has and
// T does not are ignored (producers may add some), and a JSON null gives
// T's zero value.
//
// Its error is marked [Permanent]: a payload that does not decode now
// never will, so a handler that returns it sends the task to the dead
// letters at once, the decode error as the reason, instead of retrying
// it. The error wraps encoding/json's (errors.As finds a
// *json.SyntaxError or a *json.UnmarshalTypeError); wrap it in [Retry]
// to have it retried all the same.
func JSON[T any](t *Task) (T, error) {
	var v T
	if err := json.Unmarshal(t.Payload, &v); err != nil {
		return v, Permanent(fmt.Errorf("decode payload of task %q (type %q, %s) as %T: %w", t.ID, t.Type, t.ContentType, v, err))
	}
	return v, nil
}
