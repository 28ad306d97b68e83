package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var nsSeq atomic.Int64

// testNS is a namespace unique to the test, so tests never share keys.
func testNS(tb testing.TB) string {
	tb.Helper()
	name := strings.NewReplacer("/", "-", " ", "_", "{", "(", "}", ")").Replace(tb.Name())
	return fmt.Sprintf("t%d-%s", nsSeq.Add(1), name)
}

// countHook counts what a go-redis client sends: each command or pipeline
// is one network round trip.
type countHook struct {
	cmds  atomic.Int64
	pipes atomic.Int64
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipes.Add(1)
		return next(ctx, cmds)
	}
}

// roundTrips is how many commands plus pipelines were sent.
func (h *countHook) roundTrips() int64 { return h.cmds.Load() + h.pipes.Load() }

func newLimiter(tb testing.TB, rdb redis.UniversalClient, ns string, rules RuleSource, o Options) *Limiter {
	tb.Helper()
	o.Namespace = ns
	l, err := NewLimiter(rdb, rules, o)
	if err != nil {
		tb.Fatalf("new limiter: %v", err)
	}
	return l
}

func items(typ string, n int, prio int) []Item {
	out := make([]Item, n)
	for i := range out {
		out[i] = Item{ID: fmt.Sprintf("%s-%d", typ, i), Type: typ, Priority: prio}
	}
	return out
}

func dur(d time.Duration) Duration { return Duration(d) }

// redisMillis is Redis' clock in ms.
func redisMillis(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	tm, err := rdb.Time(tb.(interface{ Context() context.Context }).Context()).Result()
	if err != nil {
		tb.Fatalf("redis TIME: %v", err)
	}
	return tm.UnixMilli()
}

// alignShift sets the limiters' clock shift so that Redis' clock plus the
// shift is 1 ms into the start of the next window of length win: a test
// then has a whole window before the next boundary. It returns the shift.
func alignShift(tb testing.TB, rdb redis.UniversalClient, win time.Duration, lims ...*Limiter) int64 {
	tb.Helper()
	now := redisMillis(tb, rdb)
	w := win.Milliseconds()
	shift := (now/w+1)*w + 1 - now
	for _, l := range lims {
		shiftOf(tb, l).Store(shift)
	}
	return shift
}
