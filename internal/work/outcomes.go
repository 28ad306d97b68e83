package work

import (
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/worker"
)

// outcomeRecord is the outcome record of a worker outcome.
func outcomeRecord(o worker.Outcome) record.OutcomeRecord {
	r := record.OutcomeRecord{
		Outcome:    string(o.Kind),
		Shard:      o.Shard,
		FinishedAt: o.Finished,
		Duration:   o.Duration,
	}
	if t := o.Task; t != nil {
		r.ID, r.Type, r.Attempt, r.MaxAttempts, r.DueAt = t.ID, t.Type, t.Attempt, t.MaxAttempts, t.DueAt
		if len(t.Headers) > 0 {
			r.Headers = t.Headers
		}
	}
	if o.Err != nil {
		r.Error = o.Err.Error()
	}
	return r
}

// onOutcome is the worker's Config.OnOutcome: it publishes every outcome
// to p (DQ_OUTCOMES_TOPIC), failed attempts only with attempts
// (DQ_OUTCOMES_ATTEMPTS), without blocking. With publishing disabled (p
// nil) it is nil.
func onOutcome(p *outcome.Publisher, attempts bool) worker.OnOutcomeFunc {
	if p == nil {
		return nil
	}
	return func(o worker.Outcome) {
		if o.Kind == worker.OutcomeFailed && !attempts {
			return
		}
		p.Publish(outcomeRecord(o))
	}
}
