package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
)

// InFlight is a task a worker holds an execution claim of (see
// claim_holder in common.lua): what GET /v1/inflight lists.
type InFlight struct {
	ID      string
	Type    string
	Shard   int
	Gen     uint64 // the claimed generation
	Attempt int    // the record's attempt: the one the worker runs
	// Owner is the claim's owner: the work process's identity and the
	// run's number (what Claim.Owner was).
	Owner     string
	ExpiresAt time.Time // the claim's deadline, by Redis' clock
}

// ListInFlight lists the claims held now (their deadline after Redis'
// clock) of every shard, soonest deadline first (then by shard and id),
// at most limit (1 to 1000; 0: 100); truncated tells that more are held.
// Each is joined with its task's record for its type and attempt; a claim
// whose record is gone (purged meanwhile) is left out. Three pipelines:
// the claims' fields (HKEYS, with Redis' clock), their values (HMGET, the
// 8 KiB pad field left out, see claim_pad), and the records of the
// claims listed (one HMGET per bucket hash). A claims hash holds the
// tasks being run, and the expired claims of workers that died until a
// claim call sweeps them (sweep_claims), so its size follows the work in
// progress.
func (s *Store) ListInFlight(ctx context.Context, limit int) (tasks []InFlight, truncated bool, err error) {
	if limit <= 0 {
		limit = 100
	}
	n := s.Map().Count
	fields := make([]*redis.StringSliceCmd, n)
	var tm *redis.TimeCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		tm = p.Time(ctx)
		for sh := range n {
			fields[sh] = p.HKeys(ctx, s.k.runs(sh))
		}
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("list in flight: %w", err)
	}
	now := task.Millis(tm.Val())
	all, err := s.heldClaims(ctx, fields, now)
	if err != nil {
		return nil, false, fmt.Errorf("list in flight: %w", err)
	}
	slices.SortFunc(all, func(a, b InFlight) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.ID, b.ID))
	})
	if len(all) > limit {
		all, truncated = all[:limit], true
	}
	if all, err = s.joinRecords(ctx, all); err != nil {
		return nil, false, fmt.Errorf("list in flight: %w", err)
	}
	return all, truncated, nil
}

// heldClaims reads the values of the claims fields (one HKEYS per shard)
// names and keeps those held at now (ms, Redis' clock).
func (s *Store) heldClaims(ctx context.Context, fields []*redis.StringSliceCmd, now int64) ([]InFlight, error) {
	vals := make([]*redis.SliceCmd, len(fields))
	names := make([][]string, len(fields))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh, c := range fields {
			for _, f := range c.Val() {
				if f != claimPad {
					names[sh] = append(names[sh], f)
				}
			}
			if len(names[sh]) > 0 {
				vals[sh] = p.HMGet(ctx, s.k.runs(sh), names[sh]...)
			}
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var all []InFlight
	for sh, c := range vals {
		if c == nil {
			continue
		}
		for j, v := range c.Val() {
			f, ok := parseClaim(names[sh][j], v, now)
			if ok {
				f.Shard = sh
				all = append(all, f)
			}
		}
	}
	return all, nil
}

// claimPad is the claims hash's pad field (claim_pad in common.lua).
const claimPad = "~pad"

// parseClaim reads claim field ("<id>:<gen>") and its value v
// ("<deadline ms>|<owner>"); ok is false for a claim not held at now
// (expired, deleted meanwhile) or not in that shape.
func parseClaim(field string, v any, now int64) (f InFlight, ok bool) {
	val, _ := v.(string)
	ms, owner, found := strings.Cut(val, "|")
	at, err := strconv.ParseInt(ms, 10, 64)
	if !found || err != nil || at <= now {
		return f, false
	}
	i := strings.LastIndexByte(field, ':')
	if i <= 0 {
		return f, false
	}
	gen, err := strconv.ParseUint(field[i+1:], 10, 64)
	if err != nil {
		return f, false
	}
	return InFlight{ID: field[:i], Gen: gen, Owner: owner, ExpiresAt: task.FromMillis(at)}, true
}

// joinRecords sets the type and attempt of each claim from its task's
// record (one HMGET per bucket hash, all in one pipeline) and returns the
// claims whose record it found, in their order.
func (s *Store) joinRecords(ctx context.Context, fs []InFlight) ([]InFlight, error) {
	type bucketKey struct{ sh, b int }
	idx := map[bucketKey][]int{}
	for i, f := range fs {
		k := bucketKey{f.Shard, bucketOf(f.ID)}
		idx[k] = append(idx[k], i)
	}
	cmds := make(map[bucketKey]*redis.SliceCmd, len(idx))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, is := range idx {
			ids := make([]string, len(is))
			for j, i := range is {
				ids[j] = fs[i].ID
			}
			cmds[k] = p.HMGet(ctx, s.k.bucketKey(k.sh, k.b), ids...)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	found := make([]bool, len(fs))
	for k, c := range cmds {
		for j, v := range c.Val() {
			rec, _ := v.(string)
			if len(rec) > 8 && rec[0] == 'M' {
				rec = rec[8:] // on its way to another shard (movestart.lua)
			}
			f := &fs[idx[k][j]]
			if t, err := decodeRecord(f.ID, rec, f.Shard); err == nil {
				f.Type, f.Attempt = t.Type, t.Attempt
				found[idx[k][j]] = true
			}
		}
	}
	out := fs[:0]
	for i, f := range fs {
		if found[i] {
			out = append(out, f)
		}
	}
	return out, nil
}
