package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/daemon/journal"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/retry"
)

// replayBatch is how many journal entries one replay step schedules.
const replayBatch = 500

// idlePoll bounds how long an idle compensator waits for a wake-up before
// it looks at the journal again (covers a lost wake-up).
const idlePoll = time.Second

// compensator replays the journal into Redis: it peeks the oldest entries,
// schedules them through the store (idempotent by id, absolute due times),
// and removes them once Redis has them. It runs from the start, so a
// restarted daemon replays what an earlier run left.
//
// Order: entries are replayed oldest first in one Schedule call per batch,
// whose results are applied per id in submission order. While the journal
// is not empty the API journals new schedules too, so that a later
// submission of an id can never overtake an earlier one.
//
// Failures: while Redis is unavailable (or answers a batch with an
// unexpected error, e.g. OOM) nothing of the batch is removed and the whole
// batch is retried after a capped exponential backoff (50ms to 2s); a
// retry re-applies entries that did reach Redis, which is harmless because
// they are applied again in the same order. An entry Redis rejects for
// good (the id exists in a state that no longer accepts other content) or
// one that cannot be decoded is removed and logged at warn with its id:
// nothing loops forever on a poison entry.
type compensator struct {
	app *App
}

// Run replays until ctx ends; it finishes the batch in progress first.
func (c *compensator) Run(ctx context.Context) error {
	a := c.app
	bo := retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second, NoJitter: true}
	for ctx.Err() == nil {
		if a.jr.Len() == 0 {
			c.idle(ctx)
			continue
		}
		st := a.store.Load()
		if st == nil || !a.redisUp.Load() {
			c.backoff(ctx, bo.Next())
			continue
		}
		// The batch runs to its end even when ctx ends meanwhile.
		if err := c.replay(context.WithoutCancel(ctx), st); err != nil {
			d := bo.Next()
			a.log.Debug("journal replay deferred", "error", err, "retry_in", d, "journal_depth", a.jr.Len())
			c.backoff(ctx, d)
			continue
		}
		bo.Reset()
	}
	return nil
}

// backoff waits d, or less when Redis is seen back (the store keeper's
// ping); new journal entries do not shorten it.
func (c *compensator) backoff(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-c.app.kick:
			if c.app.redisUp.Load() && c.app.store.Load() != nil {
				return
			}
		}
	}
}

func (c *compensator) idle(ctx context.Context) {
	t := time.NewTimer(idlePoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-c.app.kick:
	case <-t.C:
	}
}

// errRetry marks a batch that must be replayed again later.
var errRetry = errors.New("replay again later")

// replay schedules one batch of journal entries and removes the ones
// that are done.
func (c *compensator) replay(ctx context.Context, st *redisstore.Store) error {
	a := c.app
	entries, err := a.jr.Peek(ctx, replayBatch)
	if err != nil {
		a.log.Error("journal peek failed", "error", err)
		return fmt.Errorf("%w: %w", errRetry, err)
	}
	if len(entries) == 0 {
		return nil
	}
	done := make([]uint64, 0, len(entries))
	subs := make([]redisstore.Submit, 0, len(entries))
	kept := make([]journal.Entry, 0, len(entries))
	for _, e := range entries {
		t, err := decodeJournalData(e.ID, e.Data)
		if err != nil {
			a.log.Warn("dropping unreadable journal entry", "task_id", e.ID, "seq", e.Seq, "error", err)
			done = append(done, e.Seq)
			continue
		}
		subs = append(subs, redisstore.Submit{Task: t})
		kept = append(kept, e)
	}
	if len(subs) > 0 {
		octx, cancel := a.opContext(ctx)
		res, err := st.Schedule(octx, subs)
		cancel()
		a.noteRedis(err)
		a.noteWrite(err)
		for i, r := range res {
			if r.Err != nil && r.Outcome != redisstore.Rejected {
				return fmt.Errorf("%w: %w", errRetry, r.Err)
			}
			if r.Outcome == redisstore.Rejected {
				a.log.Warn("journal entry rejected by the store; dropped", "task_id", r.ID,
					"state", r.State, "journaled_at", kept[i].At, "error", r.Err)
			}
			done = append(done, kept[i].Seq)
		}
	}
	if err := a.jr.Remove(ctx, done...); err != nil {
		a.log.Error("journal remove failed", "error", err)
		return fmt.Errorf("%w: %w", errRetry, err)
	}
	a.m.replayed.Add(float64(len(done)))
	a.log.Info("journal entries replayed", "count", len(done), "journal_depth", a.jr.Len())
	return nil
}
