package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/delayq/delayq/internal/task"
)

// A journal entry's Data is the normalised task as the daemon accepted it:
//
//	version byte (1 or 2) | varint due (unix ms, absolute) | task body (task.EncodeBody)
//
// Version 2 marks a written entry: the Redis primary applied the schedule
// but its replicas did not confirm it (DQ_REDIS_REPLICA_ACKS). Its replay
// confirms it (redisstore.Submit.Confirm) instead of writing it again: a
// task changed since (a reschedule through another daemon, a cancel) is
// never set back to the journaled version.
//
// The id is the entry's ID. The due time is always absolute: a request
// with a delay (or none) was resolved with the daemon's clock when it was
// accepted, because the request cannot be resolved against Redis' clock
// while Redis is down. Replay then schedules it at that absolute time.
const (
	journalVersion        = 1
	journalVersionWritten = 2
)

var errBadJournalData = errors.New("bad journal data")

func encodeJournalData(t *task.Task, written bool) []byte {
	body := task.EncodeBody(t)
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(body))
	v := byte(journalVersion)
	if written {
		v = journalVersionWritten
	}
	b = append(b, v)
	b = binary.AppendVarint(b, task.Millis(t.DueAt))
	return append(b, body...)
}

// decodeJournalData rebuilds the task of a journal entry and validates it.
func decodeJournalData(id string, b []byte) (*task.Task, error) {
	t, _, err := decodeJournalEntry(id, b)
	return t, err
}

// decodeJournalEntry is decodeJournalData that also tells a written entry.
func decodeJournalEntry(id string, b []byte) (*task.Task, bool, error) {
	if len(b) < 1 || (b[0] != journalVersion && b[0] != journalVersionWritten) {
		return nil, false, fmt.Errorf("%w: unknown version", errBadJournalData)
	}
	written := b[0] == journalVersionWritten
	t, err := decodeJournalBody(id, b)
	return t, written, err
}

func decodeJournalBody(id string, b []byte) (*task.Task, error) {
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
