package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// The shard leader's transitions. Every one is fenced: it carries the
// leader's token (its etcd election revision), raises the shard's stored
// token to it, and is refused with ErrFenced when a higher token is stored.

//go:embed take.lua
var takeLua string

//go:embed adopt.lua
var adoptLua string

//go:embed settle.lua
var settleLua string

var (
	takeScript   = script(takeLua)
	adoptScript  = script(adoptLua)
	settleScript = script(settleLua)
)

// purgePerTake bounds how many expired finished records one take removes;
// a shard's take looks for them once every purgeEvery calls, so an idle
// shard costs as few Redis commands as possible. A take whose purge was
// full (more records expired than it could remove: a burst of deliveries
// or successes whose retention ended together) makes the next take of the
// shard purge purgeBacklog, and the poller takes again within
// PurgeAgain (Taken.PurgeMore), until the backlog is gone: the records
// of a bridge that fired a million tasks are gone soon after their
// retention, not at 100 per 8 idle polls.
const (
	purgePerTake = 100
	purgeEvery   = 8
	purgeBacklog = 1000
	// PurgeAgain is how soon a poller takes again while Taken.PurgeMore.
	PurgeAgain = 20 * time.Millisecond
)

// Taken is what one Take claimed.
type Taken struct {
	Now       time.Time // Redis' clock when the script ran (to the microsecond)
	NextDue   time.Time // earliest due time still waiting (zero: none)
	NextLease time.Time // earliest lease deadline in flight (zero: none)
	Until     time.Time // the deadline of this take's lease
	// Lease names this take's lease in the shard's in-flight set
	// ("<seq>:<count>", see take.lua); Settle names the take by it.
	Lease string
	// Reclaimed is how many of Tasks (the first ones) came from leases
	// that ran out: fired before, never settled.
	Reclaimed int
	Tasks     []*task.Task // state fired; the records as stored
	// FireAt, when not zero, is the instant (Redis' clock, after Now)
	// before which none of Tasks may be fired: a TakeAhead took them
	// before they were due. Zero: all are due already.
	FireAt time.Time
	// PurgeMore says the take's retention purge was full: the poller
	// should take again within PurgeAgain (see purgeBacklog).
	PurgeMore bool
}

// Fired names one fired copy of a task by its generation (for Settle).
type Fired struct {
	ID  string
	Gen uint64
}

// Fired lists the claims of t, for Settle.
func (t Taken) Fired() []Fired {
	out := make([]Fired, len(t.Tasks))
	for i, tk := range t.Tasks {
		out[i] = Fired{ID: tk.ID, Gen: tk.Gen}
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

// takeHeader is how many values come before the tasks in take.lua's reply.
const takeHeader = 6

// Take claims up to limit due tasks of a shard (and tasks whose lease ran
// out) with a lease, and says when the next task is due.
func (s *Store) Take(ctx context.Context, shard int, token int64, limit int, lease time.Duration) (Taken, error) {
	return s.TakeAhead(ctx, shard, token, limit, lease, 0)
}

// TakeAhead is Take that, when nothing is due yet and the shard's next task
// is due within ahead (whole milliseconds), takes the tasks of that next
// millisecond now: the caller must not fire them before Taken.FireAt.
func (s *Store) TakeAhead(ctx context.Context, shard int, token int64, limit int, lease, ahead time.Duration) (Taken, error) {
	args := []any{token, limit, lease.Milliseconds(), s.k.prefix[shard], s.purgeBudget(shard), max(ahead.Milliseconds(), 0)}
	args = plantTakeArgs(args) // a dqplant build's localclock (plant_on.go); nothing otherwise
	v, err := s.run(ctx, takeScript,
		[]string{s.k.due(shard), s.k.inflight(shard), s.k.fence(shard), s.k.done(shard), s.k.errs(shard), s.k.leaseSeq(shard), s.k.receipts(shard), s.k.delivered(shard)},
		args...)
	if err != nil {
		return Taken{}, fmt.Errorf("take shard %d: %w", shard, err)
	}
	if err := fencedErr(v); err != nil {
		return Taken{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) < takeHeader || (len(a)-takeHeader)%2 != 0 {
		return Taken{}, fmt.Errorf("take shard %d: unexpected reply %v", shard, v)
	}
	nowUS, _ := a[0].(int64)
	next, _ := a[1].(int64)
	lease2, _ := a[2].(int64)
	member, _ := a[3].(string)
	reclaimed, _ := a[4].(int64)
	full, _ := a[5].(int64)
	s.purgeMore[shard].Store(full == 1)
	now := time.UnixMicro(nowUS).UTC()
	out := Taken{Now: now, Until: task.FromMillis(nowUS/1000 + lease.Milliseconds()), Lease: member, Reclaimed: int(reclaimed),
		PurgeMore: full == 1}
	if next >= 0 {
		out.NextDue = task.FromMillis(next)
	}
	if lease2 >= 0 {
		out.NextLease = task.FromMillis(lease2)
	}
	out.Tasks = make([]*task.Task, 0, (len(a)-takeHeader)/2)
	for i := takeHeader; i < len(a); i += 2 {
		id, _ := a[i].(string)
		rec, _ := a[i+1].(string)
		t, err := decodeRecord(id, rec, shard)
		if err != nil {
			// A record this build cannot read must not block the shard:
			// the caller dead-letters it and acks this generation.
			if t == nil {
				t = &task.Task{ID: id, Shard: shard}
			}
			t.Type = ""
			t.LastError = err.Error()
		}
		t.State = task.StateFired
		out.Tasks = append(out.Tasks, t)
		if t.DueAt.After(now) && t.DueAt.After(out.FireAt) {
			out.FireAt = t.DueAt
		}
	}
	return out, nil
}

// purgeBudget is how many expired records this take of shard may purge.
func (s *Store) purgeBudget(shard int) int {
	if s.purgeMore[shard].Load() {
		return purgeBacklog
	}
	if s.takes[shard].Add(1)%purgeEvery == 1 {
		return purgePerTake
	}
	return 0
}

// Settle records the outcome of a take's produce: the claims in failed
// (Kafka did not confirm them) go back to the due set at their due time,
// unless a worker finished or retried them meanwhile, and the take's lease
// (Taken.Lease) is dropped, which makes the rest fired: O(1) besides the
// failed ones. A take whose lease ran out and was re-claimed or adopted
// since is left alone (0, 0). It returns how many tasks became fired and
// how many were released.
func (s *Store) Settle(ctx context.Context, shard int, token int64, lease string, failed []Fired) (fired, released int, err error) {
	r, err := s.SettleAcks(ctx, shard, token, lease, failed, nil)
	return r.Fired, r.Released, err
}

// Settled is what SettleAcks did.
type Settled struct {
	Fired, Released int
	// Stored says the receipts were written (and the Acks that asked for
	// it made their tasks delivered): the lease was still this take's.
	Stored bool
}

// SettleAcks is Settle that also stores the fire receipt of each copy
// Kafka acknowledged (acks): a task whose Ack says Delivered is delivered
// from then on, unless a worker claims it (see is_delivered in
// common.lua). A take settled or re-claimed already stores nothing.
func (s *Store) SettleAcks(ctx context.Context, shard int, token int64, lease string, failed []Fired, acks []Ack) (Settled, error) {
	args := make([]any, 0, 6+2*len(failed)+2*len(acks))
	delivered := 0
	for _, a := range acks {
		if a.Delivered {
			delivered++
		}
	}
	args = append(args, token, s.k.prefix[shard], lease, s.retention.Milliseconds(), len(failed), delivered)
	for _, f := range failed {
		args = append(args, f.ID, f.Gen)
	}
	for _, a := range acks {
		args = append(args, a.ID, a.pack())
	}
	v, err := s.run(ctx, settleScript, []string{s.k.inflight(shard), s.k.due(shard), s.k.fence(shard), s.k.done(shard),
		s.k.receipts(shard), s.k.delivered(shard)}, args...)
	if err != nil {
		return Settled{}, fmt.Errorf("settle shard %d: %w", shard, err)
	}
	if err := fencedErr(v); err != nil {
		return Settled{}, err
	}
	a, _ := v.([]any)
	if len(a) != 3 {
		return Settled{}, fmt.Errorf("settle shard %d: unexpected reply %v", shard, v)
	}
	f, _ := a[0].(int64)
	r, _ := a[1].(int64)
	stored, _ := a[2].(int64)
	return Settled{Fired: int(f), Released: int(r), Stored: stored == 1}, nil
}

// adoptLeasesPerCall bounds one adopt call: it rewrites one in-flight
// member's deadline per lease, whatever the lease holds.
const adoptLeasesPerCall = 1000

// Adopt is a new leader's first act: store its token as the shard's fence
// (refused when a higher one is stored) and make every lease an earlier
// leader left unsettled run out now, so that the new leader's first takes
// re-claim those tasks (Taken.Reclaimed) and fire them again. The tasks
// stay fired meanwhile (out of the due set; see adopt.lua): a copy of them
// may be in Kafka. It returns how many tasks those leases hold.
func (s *Store) Adopt(ctx context.Context, shard int, token int64) (int, error) {
	moved := 0
	for {
		v, err := s.run(ctx, adoptScript, []string{s.k.inflight(shard), s.k.due(shard), s.k.fence(shard)},
			token, s.k.prefix[shard], adoptLeasesPerCall)
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
		if left == 0 {
			return moved, nil
		}
	}
}
