package engine

import (
	"fmt"
	"testing"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// After a try whose outcome was unknown (the replicas' confirmation
// missing, a timeout), storing the same outcome again answers what that
// try left: the outcome is ours and is reported, not dropped.
func TestOwnOutcome(t *testing.T) {
	state := func(s task.State) error {
		return fmt.Errorf("finish: %w", &redisstore.StateError{ID: "x", State: s})
	}
	stale := fmt.Errorf("finish: %w", redisstore.ErrStale)
	for _, tc := range []struct {
		k    redisstore.Kind
		err  error
		want bool
	}{
		{redisstore.Succeeded, state(task.StateSucceeded), true},
		{redisstore.Succeeded, state(task.StateDead), false},
		{redisstore.Succeeded, state(task.StateCancelled), false},
		{redisstore.Succeeded, stale, false},
		{redisstore.Dead, state(task.StateDead), true},
		{redisstore.Dead, state(task.StateSucceeded), false},
		{redisstore.Retry, stale, true},
		{redisstore.Defer, stale, true},
		{redisstore.Retry, state(task.StateSucceeded), false},
		{redisstore.Retry, redisstore.ErrNotFound, false},
		{redisstore.Succeeded, nil, false},
	} {
		if got := ownOutcome(tc.k, tc.err); got != tc.want {
			t.Errorf("ownOutcome(%s, %v) = %v, want %v", tc.k, tc.err, got, tc.want)
		}
	}
}
