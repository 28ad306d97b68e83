package wire

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/jsonw"
	"github.com/delayq/delayq/internal/task"
)

// Response encoding. The hot answers (schedule results, batches) are
// appended by hand: no reflection, one buffer per response.

// TimeLayout is RFC 3339 with milliseconds; times are written in UTC.
const TimeLayout = task.TimeLayout

// FormatTime writes t in TimeLayout, in UTC.
func FormatTime(t time.Time) string {
	var buf [32]byte
	return string(jsonw.AppendTime(buf[:0], t))
}

// WriteRaw writes the JSON body b with status.
func WriteRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteJSON writes v as JSON with status (a 500 internal answer if v
// cannot be encoded).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, Internal("encode response: "+err.Error()))
		return
	}
	WriteRaw(w, status, append(b, '\n'))
}

// WriteError writes the error answer e (with Retry-After on a 503 and
// WWW-Authenticate on a 401).
func WriteError(w http.ResponseWriter, e *Error) {
	switch e.Status {
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="delayq"`)
	}
	WriteJSON(w, e.Status, errorBody{Error: e})
}

// Outcomes of a schedule answer ("outcome"), also the outcome labels of
// delayq_tasks_scheduled_total; OutcomeRejected is only a label (a
// rejected schedule answers 409 conflict).
const (
	OutcomeCreated   = "created"
	OutcomeUnchanged = "unchanged"
	OutcomeUpdated   = "updated"
	OutcomeRejected  = "rejected"
	OutcomeJournaled = "journaled"
)

// What of an existing task stood against a re-submit answered
// "unchanged" (the answer's "kept"; absent when nothing did):
//   - KeptDueAt: the task waits (or runs) at the due time of an earlier
//     submission of its id; a relative due time ("delay", or none) is not
//     computed again on a re-submit (a retried request must not push the
//     task back). To move it, PATCH /v1/tasks/{id}.
//   - KeptState: the task had already ended (succeeded, dead, cancelled,
//     delivered: the answer's "state"); nothing was scheduled. Another id
//     runs the work again (a dead task: its redrive).
const (
	KeptDueAt = "due_at"
	KeptState = "state"
)

// Scheduled is the outcome of one schedule request.
type Scheduled struct {
	ID      string
	State   task.State
	Outcome string // created, unchanged, updated, journaled
	Kept    string // "", KeptDueAt or KeptState (an unchanged outcome only)
	DueAt   time.Time
	Shard   int
	Err     *Error
}

// KeptOf is what a re-submit answered "unchanged" kept of the stored task
// in state st: KeptState when the task had ended, KeptDueAt when the
// request's due time was relative (it is not computed again), else ""
// (an absolute due time is unchanged only when it is the stored one).
func KeptOf(outcome string, st task.State, relative bool) string {
	switch {
	case outcome != OutcomeUnchanged:
		return ""
	case ended(st):
		return KeptState
	case relative:
		return KeptDueAt
	}
	return ""
}

// ended reports whether st is an end state: the task will not run again
// unless a redrive (dead) makes it wait again.
func ended(st task.State) bool {
	switch st {
	case task.StateSucceeded, task.StateDead, task.StateCancelled, task.StateDelivered:
		return true
	}
	return false
}

// Status is the HTTP status of a single schedule answer.
func (s *Scheduled) Status() int {
	switch {
	case s.Err != nil:
		return s.Err.Status
	case s.Outcome == OutcomeCreated:
		return http.StatusCreated
	case s.Outcome == OutcomeJournaled:
		return http.StatusAccepted
	}
	return http.StatusOK
}

// AppendScheduled writes {"id","state","outcome","kept"?,"due_at","shard"} or,
// for a failed item, {"id"?,"error":{"code","message","status"}}.
func AppendScheduled(b []byte, s *Scheduled) []byte {
	b = append(b, '{')
	if s.ID != "" {
		b = append(b, `"id":`...)
		b = jsonw.AppendString(b, s.ID)
		b = append(b, ',')
	}
	if s.Err != nil {
		b = append(b, `"error":{"code":`...)
		b = jsonw.AppendString(b, s.Err.Code)
		b = append(b, `,"message":`...)
		b = jsonw.AppendString(b, s.Err.Message)
		// the status the task would have got alone (a batch answers 200)
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(s.Err.Status), 10)
		return append(b, "}}"...)
	}
	b = append(b, `"state":"`...)
	b = append(b, s.State...)
	b = append(b, `","outcome":"`...)
	b = append(b, s.Outcome...)
	if s.Kept != "" {
		b = append(b, `","kept":"`...)
		b = append(b, s.Kept...)
	}
	b = append(b, `","due_at":"`...)
	b = jsonw.AppendTime(b, s.DueAt)
	b = append(b, `","shard":`...)
	b = strconv.AppendInt(b, int64(s.Shard), 10)
	return append(b, '}')
}

// taskView is the JSON of a task (GET /v1/tasks/{id}, GET /v1/tasks, dead list). The
// payload is spliced in by AppendTask so that a JSON payload comes back
// byte for byte as it was sent (encoding/json would compact it).
type taskView struct {
	ID            string            `json:"id"`
	Type          string            `json:"type"`
	State         task.State        `json:"state"`
	DueAt         string            `json:"due_at"`
	Attempt       int               `json:"attempt"`
	Shard         int               `json:"shard"`
	Topic         string            `json:"topic,omitempty"`
	Key           string            `json:"key,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	PayloadBase64 string            `json:"payload_base64,omitempty"`
	MaxAttempts   int               `json:"max_attempts"`
	Timeout       string            `json:"timeout,omitempty"`
	Priority      int               `json:"priority"`
	LastError     string            `json:"last_error,omitempty"`
	DiedAt        string            `json:"died_at,omitempty"`
	// The fire receipt: every field is there, or none (a task never
	// fired since receipts were kept). Partition and offset 0 are real.
	*receiptView
}

// receiptView is the fire receipt of a task (task.Receipt) in its JSON.
type receiptView struct {
	FiredAt      string `json:"fired_at"`      // when the record was produced
	Partition    int32  `json:"partition"`     // of the record Kafka acknowledged
	Offset       int64  `json:"offset"`        // of the record Kafka acknowledged
	FiredAttempt int    `json:"fired_attempt"` // the attempt that was fired
	FiredDueAt   string `json:"fired_due_at"`  // the due time of the fired generation
	LateMs       int64  `json:"late_ms"`       // fired_at - fired_due_at, at least 0
	LeaderToken  int64  `json:"leader_token"`  // the fencing token of the leader that fired it
}

// newReceiptView is r's JSON view, nil for nil.
func newReceiptView(r *task.Receipt) *receiptView {
	if r == nil {
		return nil
	}
	return &receiptView{
		FiredAt: FormatTime(r.FiredAt), Partition: r.Partition, Offset: r.Offset, FiredAttempt: r.Attempt,
		FiredDueAt: FormatTime(r.DueAt), LateMs: max(r.FiredAt.Sub(r.DueAt).Milliseconds(), 0), LeaderToken: r.Token,
	}
}

// AppendTask appends the JSON of t; diedAt (zero: none) is when a dead
// task died (GET of a dead task, the dead list).
func AppendTask(b []byte, t *task.Task, diedAt time.Time) ([]byte, error) {
	v := taskView{
		ID: t.ID, Type: t.Type, State: t.State, DueAt: FormatTime(t.DueAt), Attempt: t.Attempt,
		Shard: t.Shard, Topic: t.Topic, Key: t.Key, Headers: t.Headers,
		MaxAttempts: t.Attempts(), Priority: t.Priority, LastError: t.LastError,
		receiptView: newReceiptView(t.Receipt),
	}
	// A payload marked JSON that is not (written by some other path) is
	// shown as base64 rather than breaking the answer.
	rawJSON := t.PayloadJSON && len(t.Payload) > 0 && json.Valid(t.Payload)
	if !rawJSON && len(t.Payload) > 0 {
		v.PayloadBase64 = base64.StdEncoding.EncodeToString(t.Payload)
	}
	if t.Timeout > 0 {
		v.Timeout = t.Timeout.String()
	}
	if !diedAt.IsZero() {
		v.DiedAt = FormatTime(diedAt)
	}
	j, err := json.Marshal(&v)
	if err != nil {
		return b, err
	}
	if rawJSON {
		j = j[:len(j)-1]
		j = append(j, `,"payload":`...)
		j = append(j, t.Payload...)
		j = append(j, '}')
	}
	return append(b, j...), nil
}

// AppendAttempts adds t's attempt history to the JSON object of t that
// ends b (AppendTask's): "attempts", oldest first, each
// {"attempt","started_at"?,"ended_at"?,"outcome","error"?} (api.Attempt),
// and "attempts_dropped" when the store dropped older ones. Nothing when
// t has no history. GET /v1/tasks/{id} only: the lists leave it out.
func AppendAttempts(b []byte, t *task.Task) []byte {
	if len(t.History) == 0 || len(b) == 0 || b[len(b)-1] != '}' {
		return b
	}
	b = append(b[:len(b)-1], `,"attempts":[`...)
	for i, a := range t.History {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"attempt":`...)
		b = strconv.AppendInt(b, int64(a.Attempt), 10)
		if !a.StartedAt.IsZero() {
			b = append(b, `,"started_at":"`...)
			b = append(jsonw.AppendTime(b, a.StartedAt), '"')
		}
		if !a.EndedAt.IsZero() {
			b = append(b, `,"ended_at":"`...)
			b = append(jsonw.AppendTime(b, a.EndedAt), '"')
		}
		b = append(b, `,"outcome":`...)
		b = jsonw.AppendString(b, a.Outcome)
		if a.Error != "" {
			b = append(b, `,"error":`...)
			b = jsonw.AppendString(b, a.Error)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if t.HistoryDropped > 0 {
		b = append(b, `,"attempts_dropped":`...)
		b = strconv.AppendInt(b, int64(t.HistoryDropped), 10)
	}
	return append(b, '}')
}
