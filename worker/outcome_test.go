package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestOutcomeMarks(t *testing.T) {
	base := errors.New("x")
	for _, c := range []struct {
		err       error
		permanent bool
		delay     time.Duration
	}{
		{base, false, 0},
		{Retry(base), false, 0},
		{Permanent(base), true, 0},
		{fmt.Errorf("wrapped: %w", Permanent(base)), true, 0},
		{RetryAfter(3*time.Second, base), false, 3 * time.Second},
		{fmt.Errorf("wrapped: %w", RetryAfter(time.Second, base)), false, time.Second},
		{RetryAfter(0, base), false, time.Millisecond},
	} {
		if got := IsPermanent(c.err); got != c.permanent {
			t.Errorf("IsPermanent(%v) = %v", c.err, got)
		}
		d, ok := RetryDelay(c.err)
		if d != c.delay || ok != (c.delay > 0) {
			t.Errorf("RetryDelay(%v) = %v, %v", c.err, d, ok)
		}
		if !errors.Is(c.err, base) || c.err.Error() == "" {
			t.Errorf("%v does not wrap its cause", c.err)
		}
	}
	if Permanent(nil).Error() == "" || Retry(nil).Error() == "" {
		t.Error("empty message")
	}
}
