package worker

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is the delay before a failed task's next attempt: exponential in
// the attempt number, capped, with random jitter.
//
// The delay after attempt n failed is
//
//	base  = min(Max, Min × Factor^(n-1))
//	delay = base × (1 − Jitter × u),  u uniform in [0, 1)
//
// With the default Jitter 0.5 and Factor 2 a task's delays always grow
// (attempt n+1 waits at least base(n+1)/2 = base(n), more than attempt n
// waited) while tasks that failed together still spread out. Jitter 1 is
// "full jitter" (anywhere between 0 and base).
type Backoff struct {
	Min    time.Duration // first retry's base delay; default 1s
	Max    time.Duration // cap; default 10m
	Factor float64       // growth per attempt; default 2
	Jitter float64       // fraction of the base taken off at random, up to 1; 0: default 0.5; negative: none
}

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = time.Second
	}
	if b.Max <= 0 {
		b.Max = 10 * time.Minute
	}
	if b.Factor <= 0 {
		b.Factor = 2
	}
	if b.Jitter == 0 {
		b.Jitter = 0.5
	} else if b.Jitter < 0 {
		b.Jitter = 0
	}
	return b
}

func (b Backoff) validate() error {
	if b.Max < b.Min {
		return fmt.Errorf("backoff: max %s below min %s", b.Max, b.Min)
	}
	if b.Factor < 1 {
		return fmt.Errorf("backoff: factor %g below 1", b.Factor)
	}
	if b.Jitter > 1 {
		return fmt.Errorf("backoff: jitter %g above 1", b.Jitter)
	}
	return nil
}

// Base is the delay after attempt (1-based) failed, before jitter.
func (b Backoff) Base(attempt int) time.Duration {
	b = b.withDefaults()
	d := float64(b.Min) * math.Pow(b.Factor, float64(max(attempt, 1)-1))
	if d >= float64(b.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return b.Max
	}
	return time.Duration(d)
}

// Delay is the jittered delay after attempt failed; u is a uniform random
// number in [0, 1).
func (b Backoff) Delay(attempt int, u float64) time.Duration {
	b = b.withDefaults()
	base := b.Base(attempt)
	return base - time.Duration(b.Jitter*u*float64(base))
}

// next draws a delay with the package's random source.
func (b Backoff) next(attempt int) time.Duration {
	return b.Delay(attempt, rand.Float64())
}
