package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential delay: Min, then twice the previous
// delay, up to Max. With jitter (the default) Next returns a random delay
// in [d/2, d] ("equal jitter"), so processes retrying the same dependency
// spread out; NoJitter returns d itself. The zero value of the cursor is
// the start: the first Next is about Min. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	NoJitter bool // exact delays Min, 2·Min, … Max

	cur time.Duration
}

// Next returns the delay before the next try and doubles the one after.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(2*b.cur, b.Max)
	}
	if b.NoJitter {
		return b.cur
	}
	return b.cur/2 + time.Duration(rand.Int64N(int64(b.cur/2)+1))
}

// Reset starts the sequence again at Min (after a success).
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d or until ctx ends. It reports whether d passed (false:
// ctx ended first; stop retrying).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
