package chaos

import (
	"slices"
	"sync"
)

// outcome is what the client learned from one request.
type outcome int8

const (
	pending outcome = iota // no answer yet
	// ok: the daemon answered success (schedule 201/200/202, reschedule
	// or cancel 200): the operation took effect.
	ok
	// refused: the operation certainly did not take effect (a 4xx that
	// changes nothing, or no daemon accepted the connection).
	refused
	// unknown: it may or may not have taken effect, now or later (a
	// timeout, a cut connection, a 5xx after the store was tried).
	unknown
)

func (o outcome) String() string {
	return [...]string{"pending", "ok", "refused", "unknown"}[o]
}

type opKind int8

const (
	opSchedule opKind = iota
	opReschedule
	opCancel
)

func (k opKind) String() string {
	return [...]string{"schedule", "reschedule", "cancel"}[k]
}

// op is one request of the history. Times are unix milliseconds of the
// test's clock, which is the clock Redis' TIME reads (same host).
type op struct {
	kind     opKind
	due      int64 // schedule, reschedule: the due time asked for (answered, when ok)
	invoke   int64 // request sent
	complete int64 // answer received (0 while pending or when unknown)
	out      outcome
	status   int    // HTTP status, 0 without an answer
	detail   string // error or answer excerpt, for reports
	journal  bool   // schedule answered 202 (journaled)
}

// taskHist is everything the client did with one task id, in issue order
// (ops[0] is the schedule; the workload issues a task's requests one after
// another).
type taskHist struct {
	id  string
	ops []op
}

// history is the client side of a run.
type history struct {
	mu    sync.Mutex
	tasks map[string]*taskHist
	order []string
}

func newHistory() *history { return &history{tasks: map[string]*taskHist{}} }

// begin records an invocation and returns its index.
func (h *history) begin(id string, o op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tasks[id]
	if t == nil {
		t = &taskHist{id: id}
		h.tasks[id] = t
		h.order = append(h.order, id)
	}
	t.ops = append(t.ops, o)
	return len(t.ops) - 1
}

// end records the answer of op i.
func (h *history) end(id string, i int, out outcome, complete int64, status int, due int64, detail string, journal bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := &h.tasks[id].ops[i]
	o.out, o.status, o.detail, o.journal = out, status, detail, journal
	if out != unknown {
		o.complete = complete
	}
	if out == ok && due != 0 {
		o.due = due
	}
}

// snapshot returns a deep copy, in issue order.
func (h *history) snapshot() []taskHist {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]taskHist, 0, len(h.order))
	for _, id := range h.order {
		t := h.tasks[id]
		out = append(out, taskHist{id: id, ops: slices.Clone(t.ops)})
	}
	return out
}

// accepted: the schedule took effect.
func (t *taskHist) accepted() bool { return t.ops[0].out == ok }

// cancelled: a cancel took effect; maybeCancelled: one may have.
func (t *taskHist) cancelled() (done bool, at int64) {
	for _, o := range t.ops {
		if o.kind == opCancel && o.out == ok {
			return true, o.complete
		}
	}
	return false, 0
}

func (t *taskHist) maybeCancelled() bool {
	for _, o := range t.ops {
		if o.kind == opCancel && (o.out == unknown || o.out == pending) {
			return true
		}
	}
	return false
}

// mustFire: an accepted task that no cancel took (or may have taken).
func (t *taskHist) mustFire() bool {
	done, _ := t.cancelled()
	return t.accepted() && !done && !t.maybeCancelled()
}

// dueInForce is the earliest due time that can have been in force at
// firedAt (ms): the due of the last schedule or reschedule that had
// certainly taken effect before firedAt (answered before it), and the due
// of every later one invoked by then, and of every one whose outcome is
// unknown (a held request may take effect late). A record fired before
// this time fired early.
func (t *taskHist) dueInForce(firedAt int64) int64 {
	last := -1
	for i, o := range t.ops {
		if o.kind != opCancel && o.out == ok && o.complete < firedAt {
			last = i
		}
	}
	best := int64(-1)
	consider := func(d int64) {
		if best < 0 || d < best {
			best = d
		}
	}
	if last >= 0 {
		consider(t.ops[last].due)
	}
	for i, o := range t.ops {
		if o.kind == opCancel || o.out == refused || o.invoke > firedAt {
			continue
		}
		if i > last || o.out != ok {
			consider(o.due)
		}
	}
	if best < 0 {
		best = t.ops[0].due // cannot happen: the schedule was invoked before anything fired
	}
	return best
}

// earliestDue is the earliest due time any schedule or reschedule invoked
// by at could have set: a task seen (consumed, handled) before it was
// certainly fired early, whenever exactly it fired.
func (t *taskHist) earliestDue(at int64) int64 {
	best := int64(-1)
	for _, o := range t.ops {
		if o.kind == opCancel || o.out == refused || o.invoke > at {
			continue
		}
		if best < 0 || o.due < best {
			best = o.due
		}
	}
	if best < 0 {
		best = t.ops[0].due
	}
	return best
}
