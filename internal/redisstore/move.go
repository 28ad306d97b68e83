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

// codeMoved is the by-id scripts' answer for a record on its way to another
// shard; codeAbsent is schedule's answer in existing-only mode.
const (
	codeMoved  = 7
	codeAbsent = 8
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
	v, err := s.run(ctx, probeScript, []string{s.k.bucket(o, id), s.k.errs(o), s.k.stamp(o)}, id, stamp(m))
	if err != nil {
		return 0, fmt.Errorf("locate %s: %w", id, err)
	}
	a, _ := v.([]any)
	if len(a) < 2 {
		return 0, fmt.Errorf("locate %s: unexpected reply %v", id, v)
	}
	rec, _ := a[0].(string)
	switch {
	case rec == "":
		return n, nil
	case rec[0] == 'M':
		e, _ := a[1].(string)
		if err := s.finishMove(ctx, o, n, []movingTask{{id: id, value: rec, err: e}}); err != nil {
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
}

// finishMove does movein on shard n and movedone on shard o for tasks, all
// of one bucket.
func (s *Store) finishMove(ctx context.Context, o, n int, ts []movingTask) error {
	if len(ts) == 0 {
		return nil
	}
	id0 := ts[0].id
	in := make([]any, 0, 2+3*len(ts))
	in = append(in, s.k.wake, n)
	done := make([]any, 0, 2*len(ts))
	for _, t := range ts {
		in = append(in, t.id, t.value, t.err)
		done = append(done, t.id, t.value)
	}
	if _, err := s.run(ctx, moveInScript, []string{s.k.due(n), s.k.done(n), s.k.dead(n), s.k.errs(n), s.k.bucket(n, id0)}, in...); err != nil {
		return fmt.Errorf("move in to shard %d: %w", n, err)
	}
	if _, err := s.run(ctx, moveDoneScript, []string{s.k.bucket(o, id0), s.k.errs(o), s.k.progress(o)}, done...); err != nil {
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
	var r MoveResult
	bkey := s.k.prefix[o] + "t:" + strconv.Itoa(b)
	ids, err := s.rdb.HKeys(ctx, bkey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return r, fmt.Errorf("list bucket %d of shard %d: %w", b, o, err)
	}
	var foreign []string
	for _, id := range ids {
		if m.Shard(id) != o {
			foreign = append(foreign, id)
		}
	}
	r.Foreign = len(foreign)
	for len(foreign) > 0 {
		chunk := foreign[:min(len(foreign), maxPerCall)]
		foreign = foreign[len(chunk):]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, token)
		for _, id := range chunk {
			args = append(args, id)
		}
		v, err := s.run(ctx, moveStartScript,
			[]string{s.k.due(o), s.k.done(o), s.k.dead(o), s.k.errs(o), s.k.fence(o), bkey}, args...)
		if err != nil {
			return r, fmt.Errorf("move out of shard %d: %w", o, err)
		}
		a, _ := v.([]any)
		if len(a) >= 1 {
			if c, _ := a[0].(int64); c == -1 {
				return r, fmt.Errorf("move out of shard %d: %w", o, ErrFenced)
			}
		}
		if len(a) != 3*len(chunk) {
			return r, fmt.Errorf("move out of shard %d: unexpected reply %v", o, v)
		}
		byDest := map[int][]movingTask{}
		for i, id := range chunk {
			code, _ := a[3*i].(int64)
			switch code {
			case 1:
				mv, _ := a[3*i+1].(string)
				e, _ := a[3*i+2].(string)
				n := m.Shard(id)
				byDest[n] = append(byDest[n], movingTask{id: id, value: mv, err: e})
			case 3:
				r.InFlight++
			}
		}
		for n, ts := range byDest {
			if err := s.finishMove(ctx, o, n, ts); err != nil {
				return r, err
			}
			r.Moved += len(ts)
		}
	}
	return r, nil
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

var progressScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'moved', 0)
end
redis.call('HSET', KEYS[1], 'remaining', ARGV[2])
return 1`)
