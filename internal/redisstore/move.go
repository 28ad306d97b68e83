package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/shardmap"
)

// Moving tasks to the shards of a grown map. A move is three scripts, on
// two shards that may live on different Redis masters:
//
//	movestart (old shard, fenced by its leader): the record leaves its set
//	          and becomes a "moving" record that keeps all of it;
//	movein    (new shard): the record goes into the same set there, unless
//	          the new shard already has a record of the id;
//	movedone  (old shard): the moving record is deleted if unchanged.
//
// At every moment exactly one live copy exists: before movestart the old
// one, after it none that a take can fire (the moving record is in no due
// set) until movein puts the one on the new shard. A crash between the
// steps leaves a moving record; whoever meets it (the shard's next leader,
// or any GET, cancel, reschedule or schedule of that id) finishes the move
// with movein and movedone, both idempotent. See docs/design.md
// "Elastic shards".

//go:embed probe.lua
var probeLua string

//go:embed movestart.lua
var moveStartLua string

//go:embed movein.lua
var moveInLua string

//go:embed movedone.lua
var moveDoneLua string

var (
	probeScript     = script(probeLua)
	moveStartScript = script(moveStartLua)
	moveInScript    = script(moveInLua)
	moveDoneScript  = script(moveDoneLua)
)

// codeNotFound is the by-id scripts' answer for no record; codeMoved
// their answer for a record on its way to another shard; codeAbsent is
// schedule's answer in existing-only mode.
const (
	codeNotFound = 0
	codeMoved    = 7
	codeAbsent   = 8
)

// errRelocate tells an operation to locate the task again: it moved while
// the operation went to its old shard.
var errRelocate = errors.New("task moved meanwhile")

// locate returns the shard on which the task id lives under map m, or
// where it is to be created. Only while m migrates and id's shard changed
// does it ask the old shard (stamping it, see probe.lua), finishing a move
// it finds half done.
func (s *Store) locate(ctx context.Context, m shardmap.Map, id string) (int, error) {
	n := m.Shard(id)
	o, moving := m.Old(id)
	if !moving {
		return n, nil
	}
	v, err := s.run(ctx, probeScript, []string{s.k.bucket(o, id), s.k.errs(o), s.k.stamp(o), s.k.receipts(o)}, id, stamp(m))
	if err != nil {
		return 0, fmt.Errorf("locate %s: %w", id, err)
	}
	a, _ := v.([]any)
	if len(a) < 3 {
		return 0, fmt.Errorf("locate %s: unexpected reply %v", id, v)
	}
	rec, _ := a[0].(string)
	switch {
	case rec == "":
		return n, nil
	case rec[0] == 'M':
		e, _ := a[1].(string)
		rc, _ := a[2].(string)
		if err := s.finishMove(ctx, o, n, []movingTask{{id: id, value: rec, err: e, receipt: rc}}); err != nil {
			return 0, fmt.Errorf("locate %s: %w", id, err)
		}
		return n, nil
	default:
		return o, nil
	}
}

// movingTask is a moving record read from an old shard.
type movingTask struct {
	id, value, err string
	receipt        string // its fire receipt ("" for none)
}

// finishMove does movein on shard n, then movedone on shard o, for tasks
// of any buckets.
func (s *Store) finishMove(ctx context.Context, o, n int, ts []movingTask) error {
	return s.finishMoves(ctx, o, map[int][]movingTask{n: ts})
}

// finishMoves does movein on every destination shard (one pipeline), then
// movedone on shard o for the tasks that arrived.
func (s *Store) finishMoves(ctx context.Context, o int, byDest map[int][]movingTask) error {
	if len(byDest) == 0 {
		return nil
	}
	calls := make([]*shardCall, 0, len(byDest))
	var all []movingTask
	for n, ts := range byDest {
		keys := make([]string, 0, 7+len(ts))
		keys = append(keys, s.k.due(n), s.k.done(n), s.k.dead(n), s.k.errs(n), s.k.receipts(n), s.k.leaseSeq(n), s.k.delivered(n))
		args := make([]any, 0, 3+4*len(ts))
		args = append(args, s.k.wake, n, s.retention.Milliseconds())
		for _, t := range ts {
			keys = append(keys, s.k.bucket(n, t.id))
			args = append(args, t.id, t.value, t.err, t.receipt)
		}
		calls = append(calls, &shardCall{shard: n, keys: keys, args: args})
		all = append(all, ts...)
	}
	s.execCalls(ctx, moveInScript, calls)
	for _, c := range calls {
		if c.err != nil {
			return fmt.Errorf("move in to shard %d: %w", c.shard, c.err)
		}
	}
	keys := make([]string, 0, 3+len(all))
	keys = append(keys, s.k.errs(o), s.k.progress(o), s.k.receipts(o))
	args := make([]any, 0, 2*len(all))
	for _, t := range all {
		keys = append(keys, s.k.bucket(o, t.id))
		args = append(args, t.id, t.value)
	}
	if _, err := s.run(ctx, moveDoneScript, keys, args...); err != nil {
		return fmt.Errorf("move done on shard %d: %w", o, err)
	}
	return nil
}

// MoveResult is what one MoveBucket did.
type MoveResult struct {
	Foreign  int // records of the bucket that belong to another shard under the map
	Moved    int // of them, moved (or found moved) now
	InFlight int // of them, fired and not finished: moved by a later pass
}

// MoveBucket moves every task of bucket b of old shard o that belongs to
// another shard under m to that shard: the mover's unit of work. token is
// the leader's fencing token of shard o (ErrFenced when a newer leader
// exists). Records in flight are left for a later pass.
func (s *Store) MoveBucket(ctx context.Context, m shardmap.Map, o, b int, token int64) (MoveResult, error) {
	rs, err := s.MoveBuckets(ctx, m, o, []int{b}, token)
	if len(rs) == 0 {
		return MoveResult{}, err
	}
	return rs[0], err
}

// MoveBuckets is MoveBucket for several buckets of shard o, listing their
// ids in one round trip (most buckets of a later pass hold nothing to
// move). The results are in the order of buckets.
func (s *Store) MoveBuckets(ctx context.Context, m shardmap.Map, o int, buckets []int, token int64) ([]MoveResult, error) {
	lists := make([]*redis.StringSliceCmd, len(buckets))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range buckets {
			lists[i] = p.HKeys(ctx, s.k.bucketKey(o, b))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list buckets of shard %d: %w", o, err)
	}
	out := make([]MoveResult, len(buckets))
	type item struct {
		id string
		i  int // index into buckets
	}
	var foreign []item
	for i := range buckets {
		for _, id := range lists[i].Val() {
			if m.Shard(id) != o {
				foreign = append(foreign, item{id: id, i: i})
				out[i].Foreign++
			}
		}
	}
	for len(foreign) > 0 {
		chunk := foreign[:min(len(foreign), maxPerCall)]
		foreign = foreign[len(chunk):]
		keys := make([]string, 0, 7+len(chunk))
		keys = append(keys, s.k.due(o), s.k.done(o), s.k.dead(o), s.k.errs(o), s.k.fence(o), s.k.runs(o), s.k.receipts(o))
		args := make([]any, 0, 1+len(chunk))
		args = append(args, token)
		for _, it := range chunk {
			keys = append(keys, s.k.bucket(o, it.id))
			args = append(args, it.id)
		}
		v, err := s.run(ctx, moveStartScript, keys, args...)
		if err != nil {
			return out, fmt.Errorf("move out of shard %d: %w", o, err)
		}
		a, _ := v.([]any)
		if len(a) >= 1 {
			if c, _ := a[0].(int64); c == -1 {
				return out, fmt.Errorf("move out of shard %d: %w", o, ErrFenced)
			}
		}
		if len(a) != 4*len(chunk) {
			return out, fmt.Errorf("move out of shard %d: unexpected reply %v", o, v)
		}
		byDest := map[int][]movingTask{}
		var started []item
		for j, it := range chunk {
			code, _ := a[4*j].(int64)
			switch code {
			case 1:
				mv, _ := a[4*j+1].(string)
				e, _ := a[4*j+2].(string)
				rc, _ := a[4*j+3].(string)
				n := m.Shard(it.id)
				byDest[n] = append(byDest[n], movingTask{id: it.id, value: mv, err: e, receipt: rc})
				started = append(started, it)
			case 3:
				out[it.i].InFlight++
			}
		}
		if err := s.finishMoves(ctx, o, byDest); err != nil {
			return out, err
		}
		for _, it := range started {
			out[it.i].Moved++
		}
	}
	return out, nil
}

// SetGrowProgress records a mover's count of tasks still to move out of
// old shard o for growth m (GrowProgress sums them). The first call of a
// growth resets the shard's moved counter.
func (s *Store) SetGrowProgress(ctx context.Context, m shardmap.Map, o int, remaining int64) error {
	key := s.k.progress(o)
	ep := strconv.FormatInt(m.Epoch, 10)
	_, err := progressScript.Run(ctx, s.rdb, []string{key}, ep, remaining).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("record growth progress of shard %d: %w", o, err)
	}
	return nil
}

//go:embed progress.lua
var progressLua string

var progressScript = redis.NewScript(progressLua)

// EstimateForeign estimates how many records of old shard o belong to
// other shards under m: its waiting, finished and dead tasks times the
// share that moves, (Count - Previous) / Count. A mover records it before
// its first move, so that progress starts from a sensible figure.
func (s *Store) EstimateForeign(ctx context.Context, m shardmap.Map, o int) (int64, error) {
	var due, done, dead *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		due, done, dead = p.ZCard(ctx, s.k.due(o)), p.ZCard(ctx, s.k.done(o)), p.ZCard(ctx, s.k.dead(o))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count shard %d: %w", o, err)
	}
	n := due.Val() + done.Val() + dead.Val()
	return n * int64(m.Count-m.Previous) / int64(m.Count), nil
}
