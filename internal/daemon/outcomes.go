package daemon

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
)

// The daemon's outcome records: a "cancelled" record for every task it
// cancels (DELETE /v1/tasks/{id}, POST /v1/tasks/cancel), published best
// effort once the cancel is stored in Redis, when DQ_KAFKA_BROKERS is set
// (and DQ_OUTCOMES_TOPIC is not "" or none). The journal holds only schedules, so
// the compensator never replays a cancel: there is nothing to publish
// there. Each cancelled task is read back once (one Redis round trip) for
// its type, attempt and headers; a task that cannot be read back is
// counted in delayq_outcomes_dropped_total{reason="read"}.

// outcomeDrain bounds how long shutdown waits for queued outcome records.
const outcomeDrain = 5 * time.Second

// openOutcomes builds the outcome publisher: nil (disabled) without
// brokers or topic.
func (a *App) openOutcomes(ctx context.Context) error {
	if len(a.cfg.KafkaBrokers) == 0 || !outcome.Enabled(a.cfg.OutcomesTopic) {
		return nil
	}
	kc, err := a.cfg.Conn()
	if err != nil {
		return err
	}
	a.outcomes, err = outcome.New(ctx, outcome.Config{
		Brokers:    a.cfg.KafkaBrokers,
		Topic:      a.cfg.OutcomesTopic,
		Conn:       kc,
		ClientID:   "delayq-daemon",
		Log:        a.log,
		Registerer: a.reg,
	})
	return err
}

// closeOutcomes writes what is queued, for at most outcomeDrain.
func (a *App) closeOutcomes(ctx context.Context) {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeDrain)
	defer cancel()
	if err := a.outcomes.Close(octx); err != nil {
		a.log.Warn("close outcome publisher", "err", err)
	}
}

// publishCancelled publishes the "cancelled" record of id, whose cancel
// was just stored: it reads the task back for its fields.
func (a *App) publishCancelled(ctx context.Context, st *redisstore.Store, id string) {
	if a.outcomes == nil {
		return
	}
	now := a.core.now()
	octx, cancel := a.core.opContext(ctx)
	t, err := st.Get(octx, id)
	cancel()
	if err != nil {
		a.log.Debug("cancelled task not read back; no outcome record", "task_id", id, "err", err)
		a.outcomes.Drop(outcome.DropRead, 1, err)
		return
	}
	var hs map[string]string
	if len(t.Headers) > 0 {
		hs = t.Headers
	}
	a.outcomes.Publish(record.OutcomeRecord{
		ID: t.ID, Type: t.Type, Outcome: record.OutcomeCancelled,
		Attempt: max(t.Attempt, 1), MaxAttempts: t.Attempts(),
		DueAt: t.DueAt, FinishedAt: now.UTC(), Shard: t.Shard, Headers: hs,
	})
}

// cancelMany is POST /v1/tasks/cancel's by-id operation: the store's
// CancelMany, or, when publishing outcomes, CancelEach publishing each
// task it cancelled.
func (a *App) cancelMany(st *redisstore.Store) func(context.Context, []string) (int, error) {
	if a.outcomes == nil {
		return st.CancelMany
	}
	return func(ctx context.Context, ids []string) (int, error) {
		return st.CancelEach(ctx, ids, func(ctx context.Context, id string) { a.publishCancelled(ctx, st, id) })
	}
}
