package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/fault"
	"github.com/delayq/delayq/internal/task"
)

// The shard leader's transitions. Every one is fenced: it carries the
// leader's token (its etcd election revision), raises the shard's stored
// token to it, and is refused with ErrFenced when a higher token is stored.

//go:embed take.lua
var takeLua string

//go:embed ack.lua
var ackLua string

//go:embed release.lua
var releaseLua string

//go:embed adopt.lua
var adoptLua string

//go:embed settle.lua
var settleLua string

var (
	takeScript    = script(plantLocalClock(takeLua))
	ackScript     = script(ackLua)
	releaseScript = script(releaseLua)
	adoptScript   = script(adoptLua)
	settleScript  = script(settleLua)
)

// plantLocalClock is a planted bug (test builds only): the take trusts the
// process clock (ARGV[6], fault.Now) instead of Redis TIME.
func plantLocalClock(src string) string {
	if fault.Plant("localclock") {
		return strings.Replace(src, "local now = now_ms()", "local now = tonumber(ARGV[6])", 1)
	}
	return src
}

// purgePerTake bounds how many expired finished records one take removes;
// a shard's take looks for them once every purgeEvery calls, so an idle
// shard costs as few Redis commands as possible.
const (
	purgePerTake = 100
	purgeEvery   = 8
)

// Taken is what one Take claimed.
type Taken struct {
	Now       time.Time // Redis' clock when the script ran (to the microsecond)
	NextDue   time.Time // earliest due time still waiting (zero: none)
	NextLease time.Time // earliest lease deadline in flight (zero: none)
	Until     time.Time // the lease deadline of every claim of this take
	// Lease is the lease score every claim of this take holds in the
	// shard's in-flight set: Until in ms plus a fraction no other take in
	// flight has (see take.lua). Settle and Ack name the take by it.
	Lease string
	Tasks []*task.Task // state firing, Gen already incremented
}

// Fired names one fired copy of a task: its generation (for Release) and
// the lease score of the take that claimed it (for Ack and Settle).
type Fired struct {
	ID    string
	Gen   uint64
	Lease string
}

// Fired lists the claims of t, for Ack or Release.
func (t Taken) Fired() []Fired {
	out := make([]Fired, len(t.Tasks))
	for i, tk := range t.Tasks {
		out[i] = Fired{ID: tk.ID, Gen: tk.Gen, Lease: t.Lease}
	}
	return out
}

func fencedErr(v any) error {
	if a, ok := v.([]any); ok && len(a) == 2 {
		if c, _ := a[0].(int64); c == -1 {
			stored, _ := a[1].(int64)
			return fmt.Errorf("%w (stored token %d)", ErrFenced, stored)
		}
	}
	return nil
}

// Take claims up to max due tasks of a shard (and tasks whose lease ran
// out) with a lease, and says when the next task is due.
func (s *Store) Take(ctx context.Context, shard int, token int64, max int, lease time.Duration) (Taken, error) {
	args := []any{token, max, lease.Milliseconds(), s.k.prefix[shard], s.purgeBudget(shard)}
	if fault.Plant("localclock") {
		args = append(args, task.Millis(fault.Now()))
	}
	v, err := s.run(ctx, takeScript,
		[]string{s.k.due(shard), s.k.inflight(shard), s.k.fence(shard), s.k.done(shard), s.k.errs(shard), s.k.leaseSeq(shard)},
		args...)
	if err != nil {
		return Taken{}, fmt.Errorf("take shard %d: %w", shard, err)
	}
	if err := fencedErr(v); err != nil {
		return Taken{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) < 4 || (len(a)-4)%2 != 0 {
		return Taken{}, fmt.Errorf("take shard %d: unexpected reply %v", shard, v)
	}
	nowUS, _ := a[0].(int64)
	next, _ := a[1].(int64)
	lease2, _ := a[2].(int64)
	score, _ := a[3].(string)
	now := time.UnixMicro(nowUS).UTC()
	out := Taken{Now: now, Until: task.FromMillis(nowUS/1000 + lease.Milliseconds()), Lease: score}
	if next >= 0 {
		out.NextDue = task.FromMillis(next)
	}
	if lease2 >= 0 {
		out.NextLease = task.FromMillis(lease2)
	}
	out.Tasks = make([]*task.Task, 0, (len(a)-4)/2)
	for i := 4; i < len(a); i += 2 {
		id, _ := a[i].(string)
		rec, _ := a[i+1].(string)
		t, err := decodeRecord(id, rec, shard)
		if err != nil {
			// A record this build cannot read must not block the shard:
			// the caller dead-letters it and acks this generation.
			if t == nil {
				t = &task.Task{ID: id, Shard: shard, State: task.StateFiring}
			}
			t.Type = ""
			t.LastError = err.Error()
		}
		out.Tasks = append(out.Tasks, t)
	}
	return out, nil
}

// purgeBudget is how many expired records this take of shard may purge.
func (s *Store) purgeBudget(shard int) int {
	if s.takes[shard].Add(1)%purgeEvery == 1 {
		return purgePerTake
	}
	return 0
}

func firedArgs(token int64, prefix string, fired []Fired) []any {
	args := make([]any, 0, 2+2*len(fired))
	args = append(args, token, prefix)
	for _, f := range fired {
		args = append(args, f.ID, f.Gen)
	}
	return args
}

func ackArgs(token int64, fired []Fired) []any {
	args := make([]any, 0, 1+2*len(fired))
	args = append(args, token)
	for _, f := range fired {
		args = append(args, f.ID, f.Lease)
	}
	return args
}

func count(v any) int {
	if a, ok := v.([]any); ok && len(a) >= 1 {
		n, _ := a[0].(int64)
		return int(n)
	}
	return 0
}

// Ack records that Kafka confirmed these claims: it drops each lease that
// is still the one of the claiming take (Fired.Lease), which makes the task
// fired. It returns how many leases it dropped. A poller settles a whole
// take with Settle instead.
func (s *Store) Ack(ctx context.Context, shard int, token int64, fired []Fired) (int, error) {
	v, err := s.run(ctx, ackScript, []string{s.k.inflight(shard), s.k.fence(shard)},
		ackArgs(token, fired)...)
	if err != nil {
		return 0, fmt.Errorf("ack shard %d: %w", shard, err)
	}
	if err := fencedErr(v); err != nil {
		return 0, err
	}
	return count(v), nil
}

// Release puts tasks that Kafka did not confirm back into the due set at
// their due time.
func (s *Store) Release(ctx context.Context, shard int, token int64, fired []Fired) (int, error) {
	v, err := s.run(ctx, releaseScript, []string{s.k.inflight(shard), s.k.due(shard), s.k.fence(shard)},
		firedArgs(token, s.k.prefix[shard], fired)...)
	if err != nil {
		return 0, fmt.Errorf("release shard %d: %w", shard, err)
	}
	if err := fencedErr(v); err != nil {
		return 0, err
	}
	return count(v), nil
}

// Settle records the outcome of a take's produce: the claims in failed
// (Kafka did not confirm them) go back to the due set at their due time,
// then every other claim the take (named by its lease score, Taken.Lease)
// still holds becomes fired, in one range removal instead of one check per
// task. Claims re-taken since (their lease ran out) are left alone. It
// returns how many tasks became fired and how many were released.
func (s *Store) Settle(ctx context.Context, shard int, token int64, lease string, failed []Fired) (fired, released int, err error) {
	args := make([]any, 0, 3+2*len(failed))
	args = append(args, token, s.k.prefix[shard], lease)
	for _, f := range failed {
		args = append(args, f.ID, f.Gen)
	}
	v, err := s.run(ctx, settleScript, []string{s.k.inflight(shard), s.k.due(shard), s.k.fence(shard)}, args...)
	if err != nil {
		return 0, 0, fmt.Errorf("settle shard %d: %w", shard, err)
	}
	if err := fencedErr(v); err != nil {
		return 0, 0, err
	}
	a, _ := v.([]any)
	if len(a) != 2 {
		return 0, 0, fmt.Errorf("settle shard %d: unexpected reply %v", shard, v)
	}
	f, _ := a[0].(int64)
	r, _ := a[1].(int64)
	return int(f), int(r), nil
}

// Adopt is a new leader's first act: store its token as the shard's fence
// (refused when a higher one is stored) and put every task an earlier
// leader had claimed but not acked back into the due set. It returns how
// many tasks it moved back.
func (s *Store) Adopt(ctx context.Context, shard int, token int64) (int, error) {
	moved := 0
	for {
		v, err := s.run(ctx, adoptScript, []string{s.k.inflight(shard), s.k.due(shard), s.k.fence(shard)},
			token, s.k.prefix[shard], maxPerCall)
		if err != nil {
			return moved, fmt.Errorf("adopt shard %d: %w", shard, err)
		}
		if err := fencedErr(v); err != nil {
			return moved, err
		}
		a, _ := v.([]any)
		if len(a) != 2 {
			return moved, fmt.Errorf("adopt shard %d: unexpected reply %v", shard, v)
		}
		n, _ := a[0].(int64)
		left, _ := a[1].(int64)
		moved += int(n)
		if left == 0 || n == 0 {
			return moved, nil
		}
	}
}
