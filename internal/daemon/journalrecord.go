package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/delayq/delayq/internal/task"
)

// A journal entry's Data is the normalised task as the daemon accepted it:
//
//	version byte (1) | varint due (unix ms, absolute) | task body (task.EncodeBody)
//
// The id is the entry's ID. The due time is always absolute: a request
// with a delay (or none) was resolved with the daemon's clock when it was
// accepted, because the request cannot be resolved against Redis' clock
// while Redis is down. Replay then schedules it at that absolute time.
const journalVersion = 1

var errBadJournalData = errors.New("bad journal data")

func encodeJournalData(t *task.Task) []byte {
	body := task.EncodeBody(t)
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(body))
	b = append(b, journalVersion)
	b = binary.AppendVarint(b, task.Millis(t.DueAt))
	return append(b, body...)
}

// decodeJournalData rebuilds the task of a journal entry and validates it.
func decodeJournalData(id string, b []byte) (*task.Task, error) {
	if len(b) < 1 || b[0] != journalVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadJournalData)
	}
	ms, n := binary.Varint(b[1:])
	if n <= 0 {
		return nil, fmt.Errorf("%w: due time", errBadJournalData)
	}
	t := &task.Task{ID: id, DueAt: task.FromMillis(ms)}
	if err := task.DecodeBody(b[1+n:], t); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadJournalData, err)
	}
	if err := t.ValidateStored(); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadJournalData, err)
	}
	return t, nil
}
