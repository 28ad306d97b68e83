package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// The worker's batched transitions: claiming the execution of fired tasks
// and storing many outcomes in one round trip.

//go:embed claim.lua
var claimLua string

//go:embed unclaim.lua
var unclaimLua string

//go:embed extend.lua
var extendLua string

// claimSweepEvery: one claim call in claimSweepEvery, drawn at random,
// sweeps expired claims from one of its shards' claims hashes
// (sweep_claims in common.lua). At random, not every n-th call: a
// worker's calls come in the same order of shards batch after batch (a
// call per shard on a Redis Cluster), and a count would sweep the same few
// shards for ever. Swept on every call, the sweep's HRANDFIELD and HMGET
// were 4.3% of the claim and finish's redis-server instructions per task
// in a worker's batches of fourteen tasks per shard, 7.8% in batches of
// one (BenchmarkRedisInstructions, session 41); what it is for, the
// claims of workers that died and whose copies never came back, is rare
// and waits a few more calls.
const claimSweepEvery = 8

var (
	claimScript   = script(claimLua)
	unclaimScript = script(unclaimLua)
	extendScript  = script(extendLua)
)

// Claim asks for the execution of one fired task: generation Gen of task
// ID, held by Owner for TTL.
type Claim struct {
	ID    string
	Gen   uint64
	TTL   time.Duration
	Owner string
	// Due, when set, is the due time the fired copy carries (dq-due-at):
	// a record that holds another due time is a stale copy, like one of
	// another generation. (Generations restart at 0 when an id is used
	// again after its record expired: the due time tells an old copy,
	// replayed from Kafka, from the new task.)
	Due time.Time
	// Shard is the shard the task was fired from: the dq-shard header of
	// its Kafka copy, or the Task.Shard a claim returned. A fired task
	// stays on that shard until it is finished, also while the shard map
	// grows. Set ShardSet with it; without, the shard the store's map
	// gives the id is used (wrong for a task fired from its old shard
	// while the map grows).
	Shard    int
	ShardSet bool
}

// ClaimCode is what ClaimMany decided for one task.
type ClaimCode int

// The codes of ClaimMany.
const (
	ClaimNotFound ClaimCode = 0 // no record of the task
	Claimed       ClaimCode = 1 // the marker is ours now (or was already: a retry); Task is set
	ClaimStale    ClaimCode = 5 // the record has another generation
	ClaimFinished ClaimCode = 6 // not firing/fired: this generation's outcome is stored
	ClaimHeld     ClaimCode = 7 // another owner holds the marker
)

// ClaimResult is the answer for one Claim.
type ClaimResult struct {
	Code  ClaimCode
	State task.State // the record's state when it exists
	Task  *task.Task // the task when Claimed
	// Err is set when the task's shard group could not be claimed (Redis
	// unreachable: see IsUnavailable; the outcome is unknown, retry with
	// the same Owner) or its record is unreadable (wraps task.ErrCorrupt).
	Err error
}

// ClaimMany claims the execution of fired tasks: for each, atomically, the
// record must exist with that generation in state firing or fired, and the
// claim (field <id>:<gen> of the shard's claims hash, see claim_holder in
// common.lua) is set with Owner and a deadline TTL from now, unless another
// owner holds it. Tasks are grouped by shard into script calls (packCalls)
// and all calls go out in one pipeline. Results are in the order of cs. The
// error is the first group error (those results carry it too).
func (s *Store) ClaimMany(ctx context.Context, cs []Claim) ([]ClaimResult, error) {
	res := make([]ClaimResult, len(cs))
	// one TTL per script call (claim.lua): the claims are grouped by TTL,
	// then by shard; a worker's batch mostly shares one TTL
	var calls []*shardCall
	for _, group := range byTTL(cs) {
		ttl := max(cs[group[0]].TTL.Milliseconds(), 1)
		secs := chunks(group, func(i int) int { return s.firedShard(cs[i].ID, cs[i].Shard, cs[i].ShardSet) })
		gc := s.packShards(secs, []any{ttl, 0}, func(sec *chunk[int], c *shardCall) {
			sh := sec.key
			c.keys = append(c.keys, s.k.runs(sh), s.k.done(sh))
			c.args = append(c.args, len(sec.idx))
			for _, i := range sec.idx {
				cl := cs[i]
				due := int64(-1)
				if !cl.Due.IsZero() {
					due = task.Millis(cl.Due)
				}
				c.keys = append(c.keys, s.k.bucket(sh, cl.ID))
				c.args = append(c.args, cl.ID, cl.Gen, cl.Owner, due)
			}
		})
		for _, c := range gc {
			if rand.IntN(claimSweepEvery) == 0 {
				c.args[1] = 1
			}
		}
		calls = append(calls, gc...)
	}
	s.execCalls(ctx, claimScript, calls)
	firstErr := fanOut(calls, "claim", func(c *shardCall) error { return s.fillClaims(res, c.idx, c.shards, cs, c.val) },
		func(i int, err error) { res[i] = ClaimResult{Err: err} })
	// A copy fired from a shard that a growth has since moved the task
	// off (it moves once finished or waiting again: movestart.lua) finds
	// nothing there: it is asked again on the shard the map routes its id
	// to, where the record tells finished or stale, not an unknown id.
	var again []int
	for i, r := range res {
		if r.Err == nil && r.Code == ClaimNotFound && cs[i].ShardSet && cs[i].Shard != s.Shard(cs[i].ID) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		sub := make([]Claim, len(again))
		for j, i := range again {
			sub[j] = cs[i]
			sub[j].ShardSet = false
		}
		rs, err := s.ClaimMany(ctx, sub)
		for j, i := range again {
			res[i] = rs[j]
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return res, firstErr
}

// byTTL groups the indexes of cs by their TTL in milliseconds, in order
// of first appearance (a batch has few distinct TTLs: a linear search).
func byTTL(cs []Claim) [][]int {
	var ttls []int64
	var groups [][]int
	for i, c := range cs {
		g := slices.Index(ttls, c.TTL.Milliseconds())
		if g < 0 {
			g = len(ttls)
			ttls = append(ttls, c.TTL.Milliseconds())
			groups = append(groups, make([]int, 0, len(cs)-i))
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

func (s *Store) fillClaims(res []ClaimResult, idx []int, shards []int, cs []Claim, v any) error {
	a, ok := v.([]any)
	if !ok || len(a) != 3*len(idx) {
		return fmt.Errorf("unexpected claim reply of %d items for %d tasks", len(a), len(idx))
	}
	for j, i := range idx {
		code, _ := a[3*j].(int64)
		st, _ := a[3*j+1].(string)
		r := ClaimResult{Code: ClaimCode(code), State: stateNames[st]}
		if r.Code == Claimed {
			// a fired task's record keeps its waiting state (see common.lua)
			r.State = task.StateFired
			rec, _ := a[3*j+2].(string)
			t, err := decodeRecord(cs[i].ID, rec, shards[j])
			if err != nil {
				r.Err = err
			}
			if t != nil {
				t.State = task.StateFired
			}
			r.Task = t
		}
		res[i] = r
	}
	return nil
}

// ReleaseMany gives up execution claims: each claim is deleted only
// if it still holds its Claim's Owner (ID, Gen and Owner are used). Claims
// are grouped by shard and the shards packed into script calls
// (packCalls), all calls in one pipeline. It returns how many
// markers were deleted and the first error (a claim not released expires
// with its TTL).
func (s *Store) ReleaseMany(ctx context.Context, cs []Claim) (int, error) {
	secs := chunks(indexes(len(cs)), func(i int) int { return s.firedShard(cs[i].ID, cs[i].Shard, cs[i].ShardSet) })
	calls := s.packShards(secs, nil, func(sec *chunk[int], c *shardCall) {
		c.keys = append(c.keys, s.k.runs(sec.key))
		c.args = append(c.args, len(sec.idx))
		for _, i := range sec.idx {
			c.args = append(c.args, claimField(cs[i].ID, cs[i].Gen), cs[i].Owner)
		}
	})
	s.execCalls(ctx, unclaimScript, calls)
	n := 0
	for _, c := range calls {
		if c.err != nil {
			return n, fmt.Errorf("release on %s: %w", c.where(), c.err)
		}
		d, _ := c.val.(int64)
		n += int(d)
	}
	return n, nil
}

// ReleaseClaim gives one execution claim up now (unclaim.lua, like
// ReleaseMany): the claim is deleted only if it still holds c.Owner
// (ID, Gen and Owner are used). It reports whether it was deleted.
func (s *Store) ReleaseClaim(ctx context.Context, c Claim) (bool, error) {
	sh := s.firedShard(c.ID, c.Shard, c.ShardSet)
	v, err := s.run(ctx, unclaimScript, []string{s.k.runs(sh)}, 1, claimField(c.ID, c.Gen), c.Owner)
	if err != nil {
		return false, fmt.Errorf("release claim %s gen %d: %w", c.ID, c.Gen, err)
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// ExtendClaim sets the TTL of an execution claim again to c.TTL (the
// task's own timeout turned out longer than the one the claim was taken
// for), only while c.Owner holds it: a claim that expired and was taken by
// another run is not touched. It reports whether the TTL was set.
func (s *Store) ExtendClaim(ctx context.Context, c Claim) (bool, error) {
	sh := s.firedShard(c.ID, c.Shard, c.ShardSet)
	v, err := s.run(ctx, extendScript, []string{s.k.runs(sh)}, claimField(c.ID, c.Gen), c.Owner, max(c.TTL.Milliseconds(), 1))
	if err != nil {
		return false, fmt.Errorf("extend claim %s gen %d: %w", c.ID, c.Gen, err)
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// firedShard is the shard a claim or finish goes to (see Claim.Shard).
func (s *Store) firedShard(id string, sh int, set bool) int {
	if set && sh >= 0 && sh < shardmap.MaxShards {
		return sh
	}
	return s.Shard(id)
}
