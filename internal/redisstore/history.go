package redisstore

import (
	"github.com/delayq/delayq/internal/task"
)

// The attempt history: the value of a task's field in its shard's err
// hash, written by finish.lua and firepoison.lua (history_append in
// common.lua, which documents the layout):
//
//	\1 <count uint8> <dropped uint32> entries, oldest first
//	entry: <attempt uint16> <started ms uint48> <ended ms uint48>
//	       <outcome: r, d or S> <error length uint16> <error>
//
// A value in any other shape is the plain last error written before the
// history existed (a legacy value).

const (
	historyMagic  = 1
	historyHeader = 6  // magic, count, dropped
	historyEntry  = 17 // an entry without its error
)

// historyEntries calls f with each entry of the packed history v, oldest
// first, until f returns false; it returns false when v is not a
// well-formed history (a legacy value, or a damaged one: the caller
// reads it as a plain last error). The error is a substring of v.
func historyEntries(v string, f func(att int, started, ended int64, outcome byte, err string) bool) bool {
	if len(v) < historyHeader || v[0] != historyMagic || !historyWellFormed(v) {
		return false
	}
	for p := historyHeader; p < len(v); {
		n := u16(v, p+15)
		if !f(u16(v, p), u48(v, p+2), u48(v, p+8), v[p+14], v[p+17:p+17+n]) {
			break
		}
		p += historyEntry + n
	}
	return true
}

// historyWellFormed tells whether v's entries fill it exactly, as many
// as its header counts (at least one: the writer never writes none).
func historyWellFormed(v string) bool {
	count := 0
	p := historyHeader
	for p < len(v) {
		if len(v)-p < historyEntry {
			return false
		}
		p += historyEntry + u16(v, p+15)
		count++
	}
	return p == len(v) && count == int(v[1]) && count > 0
}

// u16 is the big-endian uint16 at v[p:].
func u16(v string, p int) int { return int(v[p])<<8 | int(v[p+1]) }

// u48 is the big-endian uint48 at v[p:].
func u48(v string, p int) int64 {
	var n int64
	for i := range 6 {
		n = n<<8 | int64(v[p+i])
	}
	return n
}

// lastError is the last error the history v tells (GET's last_error, and
// the lists'): the error of its latest failed attempt, "" when its latest
// attempt succeeded or it holds none; a legacy value is that error.
func lastError(v string) string {
	last := ""
	if !historyEntries(v, func(_ int, _, _ int64, outcome byte, err string) bool {
		if outcome == 'S' {
			last = ""
		} else {
			last = err
		}
		return true
	}) {
		return v
	}
	return last
}

// outcomeName is the API's name of a history outcome byte.
func outcomeName(b byte) string {
	switch b {
	case 'S':
		return task.OutcomeSucceeded
	case 'd':
		return task.OutcomeDead
	}
	return task.OutcomeRetry
}

// setHistory sets t.History and t.HistoryDropped from the history v
// ("" for none). A legacy value is one entry without times: a dead task's
// last attempt, or else the retry of the attempt before the current one.
// A succeeded task whose history does not end with its success (a lean
// success at the first attempt writes none, see finish.lua: at the first
// attempt, or the first after a redrive) gets that entry without times.
func setHistory(t *task.Task, v string) {
	if v != "" {
		readHistory(t, v)
	}
	if t.State != task.StateSucceeded {
		return
	}
	t.LastError = "" // a success not recorded after a redrive leaves the death last
	if n := len(t.History); n == 0 || t.History[n-1].Outcome != task.OutcomeSucceeded {
		t.History = append(t.History, task.Attempt{Attempt: t.Attempt, Outcome: task.OutcomeSucceeded})
	}
}

func readHistory(t *task.Task, v string) {
	ok := historyEntries(v, func(att int, started, ended int64, outcome byte, err string) bool {
		a := task.Attempt{Attempt: att, Outcome: outcomeName(outcome), Error: err}
		if started > 0 {
			a.StartedAt = task.FromMillis(started)
		}
		if ended > 0 {
			a.EndedAt = task.FromMillis(ended)
		}
		t.History = append(t.History, a)
		return true
	})
	if ok {
		t.HistoryDropped = u16(v, 2)<<16 | u16(v, 4)
		return
	}
	a := task.Attempt{Attempt: max(t.Attempt-1, 1), Outcome: task.OutcomeRetry, Error: v}
	if t.State == task.StateDead {
		a.Attempt, a.Outcome = t.Attempt, task.OutcomeDead
	}
	t.History = []task.Attempt{a}
}
