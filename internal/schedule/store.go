package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Schedule is a stored schedule: its spec (at the top level in JSON), when
// it was created and last changed, and the etcd revision of that change.
type Schedule struct {
	ID string `json:"id"`
	Spec
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Revision is the etcd mod revision of the schedule's key: it changes
	// with every change (the scheduler's State follows it).
	Revision int64 `json:"revision"`
}

// stored is the etcd value of a schedule.
type stored struct {
	Spec      Spec      `json:"spec"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MaxRecent is how many materialized ticks a State remembers.
const MaxRecent = 8

// State is the scheduler leader's bookkeeping for one schedule. Only the
// leader writes it, in a transaction fenced by its election key.
type State struct {
	// SpecRev is the Schedule.Revision this state follows. A change of
	// the schedule resets Through to the change and cancels pending ticks
	// the new spec does not produce.
	SpecRev int64 `json:"spec_rev"`
	// Through (unix ms): every tick up to it has been handled
	// (materialized, caught up or skipped).
	Through int64 `json:"through"`
	// Pending are materialized ticks that had not fired at the last pass.
	Pending []int64 `json:"pending,omitempty"`
	// Recent are the last MaxRecent materialized ticks, ascending.
	Recent []int64 `json:"recent,omitempty"`
}

// LastFired is the latest materialized tick at or before now.
func (st State) LastFired(now time.Time) (time.Time, bool) {
	n := now.UnixMilli()
	for i := len(st.Recent) - 1; i >= 0; i-- {
		if st.Recent[i] <= n {
			return time.UnixMilli(st.Recent[i]).UTC(), true
		}
	}
	return time.Time{}, false
}

// AddRecent records materialized ticks in Recent (kept ascending, unique,
// the last MaxRecent).
func (st *State) AddRecent(ticks ...int64) {
	r := append(slices.Clone(st.Recent), ticks...)
	slices.Sort(r)
	r = slices.Compact(r)
	if len(r) > MaxRecent {
		r = r[len(r)-MaxRecent:]
	}
	st.Recent = r
}

// Prefix is the etcd prefix of namespace ns's schedules.
func Prefix(ns string) string { return "/" + ns + "/schedules/" }

// Key is the etcd key of schedule id.
func Key(ns, id string) string { return Prefix(ns) + id }

// StatePrefix is the etcd prefix of the scheduler's states.
func StatePrefix(ns string) string { return "/" + ns + "/schedstate/" }

// StateKey is the etcd key of schedule id's state.
func StateKey(ns, id string) string { return StatePrefix(ns) + id }

// ElectionPrefix is the etcd election of the scheduler leader.
func ElectionPrefix(ns string) string { return "/" + ns + "/scheduler/leader" }

// Store keeps schedules and their states in etcd.
type Store struct {
	cli *clientv3.Client
	ns  string
	now func() time.Time
	max int64
}

// NewStore is the store of namespace ns, with no limit on the number of
// schedules.
func NewStore(cli *clientv3.Client, ns string) *Store {
	return &Store{cli: cli, ns: ns, now: time.Now}
}

// WithLimit makes Put refuse a new schedule (ErrTooMany) while the
// namespace has n or more (n <= 0: no limit); it returns s.
func (s *Store) WithLimit(n int) *Store {
	s.max = int64(n)
	return s
}

// WithClock makes the store read time from now (validation, created_at);
// it returns s.
func (s *Store) WithClock(now func() time.Time) *Store {
	s.now = now
	return s
}

// Put creates or replaces schedule id. The spec is validated first at the
// store's clock (a *FieldError, nothing written). CreatedAt is kept
// across replacements. Putting the spec a schedule already has writes
// nothing (its revision, and with it the scheduler's catch-up of missed
// ticks, stays).
//
// A new schedule while the namespace holds the store's limit or more is
// ErrTooMany; replacing one is always allowed. The limit is exact under
// concurrent creates: the count is taken at a revision R, and the write
// is a transaction that requires every schedule key to have been created
// before R (a create that raced it makes the transaction fail, and Put
// counts again).
func (s *Store) Put(ctx context.Context, id string, spec Spec) (Schedule, bool, error) {
	if err := ValidateID(id); err != nil {
		return Schedule{}, false, err
	}
	if err := spec.Validate(s.now()); err != nil {
		return Schedule{}, false, err
	}
	key := Key(s.ns, id)
	for range 10 {
		get, err := s.cli.Get(ctx, key)
		if err != nil {
			return Schedule{}, false, etcdFailed(err, "read schedule %s", id)
		}
		now := s.now().UTC().Truncate(time.Millisecond)
		v := stored{Spec: spec, CreatedAt: now, UpdatedAt: now}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
		created := true
		if len(get.Kvs) > 0 {
			created = false
			var old stored
			if json.Unmarshal(get.Kvs[0].Value, &old) == nil && !old.CreatedAt.IsZero() {
				v.CreatedAt = old.CreatedAt
				if sameSpec(old.Spec, spec) {
					return Schedule{ID: id, Spec: old.Spec, CreatedAt: old.CreatedAt, UpdatedAt: old.UpdatedAt, Revision: get.Kvs[0].ModRevision}, false, nil
				}
			}
			cmps[0] = clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)
		} else if s.max > 0 {
			cmp, err := s.roomFor(ctx)
			if err != nil {
				return Schedule{}, false, err
			}
			cmps = append(cmps, cmp)
		}
		b, err := json.Marshal(v)
		if err != nil {
			// Validate lets no such spec through (FuzzDecodeSpec): a bug
			return Schedule{}, false, fmt.Errorf("encode schedule %s: %w", id, err)
		}
		if len(b) > MaxSpecBytes {
			return Schedule{}, false, invalid("task.payload", "the schedule is %d bytes encoded; at most %d", len(b), MaxSpecBytes)
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return Schedule{}, false, etcdFailed(err, "write schedule %s", id)
		}
		if resp.Succeeded {
			return Schedule{ID: id, Spec: spec, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Revision: resp.Header.Revision}, created, nil
		}
	}
	return Schedule{}, false, fmt.Errorf("write schedule %s: %w", id, ErrBusy)
}

// roomFor counts the namespace's schedules (count only: no values travel)
// and returns ErrTooMany at the limit, or the comparison that keeps the
// count true until the write: no schedule key created after the count.
func (s *Store) roomFor(ctx context.Context) (clientv3.Cmp, error) {
	n, err := s.cli.Get(ctx, Prefix(s.ns), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return clientv3.Cmp{}, etcdFailed(err, "count schedules")
	}
	if n.Count >= s.max {
		return clientv3.Cmp{}, fmt.Errorf("%w: the namespace has %d schedules, the limit is %d", ErrTooMany, n.Count, s.max)
	}
	return clientv3.Compare(clientv3.CreateRevision(Prefix(s.ns)), "<", n.Header.Revision+1).WithPrefix(), nil
}

// sameSpec compares two specs by their encoding (times by instant, as
// JSON writes them).
func sameSpec(a, b Spec) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// Get reads schedule id (ErrNotFound).
func (s *Store) Get(ctx context.Context, id string) (Schedule, error) {
	if err := ValidateID(id); err != nil {
		return Schedule{}, err
	}
	resp, err := s.cli.Get(ctx, Key(s.ns, id))
	if err != nil {
		return Schedule{}, etcdFailed(err, "read schedule %s", id)
	}
	if len(resp.Kvs) == 0 {
		return Schedule{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return decode(id, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

func decode(id string, b []byte, rev int64) (Schedule, error) {
	var v stored
	if err := json.Unmarshal(b, &v); err != nil {
		return Schedule{}, fmt.Errorf("schedule %s: stored value does not decode: %w", id, err)
	}
	return Schedule{ID: id, Spec: v.Spec, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Revision: rev}, nil
}

// Page is one page of a listing: schedules in id order, with the
// scheduler states of those that have one, all at one etcd revision.
type Page struct {
	Schedules []Schedule
	States    map[string]State
	// Bad counts the page's values that did not decode (written by
	// hand): they are left out, so a page may hold fewer schedules than
	// the limit and still have a next one.
	Bad int
	// Last is the id of the last key of the page and More says whether
	// keys follow it: the next page is List(ctx, Last, limit).
	Last string
	More bool
}

// List reads up to limit schedules whose ids come after after ("": from
// the first) in id order (byte order, as etcd keeps them), with their
// states, in two reads at one revision. A walk page by page sees each
// schedule that exists throughout it exactly once; one created or
// deleted meanwhile may or may not be seen.
func (s *Store) List(ctx context.Context, after string, limit int) (Page, error) {
	prefix := Prefix(s.ns)
	from := prefix
	if after != "" {
		from = prefix + after + "\x00" // the first key after prefix+after
	}
	resp, err := s.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return Page{}, etcdFailed(err, "list schedules")
	}
	p := Page{States: map[string]State{}, More: resp.More}
	if len(resp.Kvs) == 0 {
		return p, nil
	}
	for _, kv := range resp.Kvs {
		sch, err := decodeKey(kv, prefix)
		if err != nil {
			p.Bad++
			continue
		}
		p.Schedules = append(p.Schedules, sch)
	}
	first := strings.TrimPrefix(string(resp.Kvs[0].Key), prefix)
	p.Last = strings.TrimPrefix(string(resp.Kvs[len(resp.Kvs)-1].Key), prefix)
	sp := StatePrefix(s.ns)
	st, err := s.cli.Get(ctx, sp+first, clientv3.WithRange(sp+p.Last+"\x00"), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return Page{}, etcdFailed(err, "list schedule states")
	}
	decodeStates(st.Kvs, sp, p.States)
	return p, nil
}

// DecodeKV decodes a key and value under the namespace's schedule
// prefix (a watch event's): ok is false for a key outside the prefix;
// err says why a value (or id) is bad.
func (s *Store) DecodeKV(kv *mvccpb.KeyValue) (sch Schedule, ok bool, err error) {
	prefix := Prefix(s.ns)
	if !strings.HasPrefix(string(kv.Key), prefix) {
		return Schedule{}, false, nil
	}
	sch, err = decodeKey(kv, prefix)
	return sch, true, err
}

// decodeKey decodes one schedule key under prefix; err when the key is
// no id or its value does not decode (sch.ID is the key's id either way).
func decodeKey(kv *mvccpb.KeyValue, prefix string) (Schedule, error) {
	id := strings.TrimPrefix(string(kv.Key), prefix)
	if err := ValidateID(id); err != nil {
		return Schedule{ID: id}, err
	}
	sch, err := decode(id, kv.Value, kv.ModRevision)
	sch.ID = id
	return sch, err
}

// decodeAll decodes schedule keys: the good ones by id, and the ids of
// the bad ones (a value that does not decode, or a key that is no id).
func decodeAll(kvs []*mvccpb.KeyValue, prefix string) (map[string]Schedule, []string) {
	m := make(map[string]Schedule, len(kvs))
	var bad []string
	for _, kv := range kvs {
		sch, err := decodeKey(kv, prefix)
		if err != nil {
			bad = append(bad, sch.ID)
			continue
		}
		m[sch.ID] = sch
	}
	return m, bad
}

// decodeStates adds the states of kvs (keys under prefix sp) to into,
// skipping values that do not decode.
func decodeStates(kvs []*mvccpb.KeyValue, sp string, into map[string]State) {
	for _, kv := range kvs {
		var st State
		if json.Unmarshal(kv.Value, &st) == nil {
			into[strings.TrimPrefix(string(kv.Key), sp)] = st
		}
	}
}

// Delete removes schedule id; deleted is false when there was none. Its
// ticks materialized ahead of time are cancelled by the scheduler.
func (s *Store) Delete(ctx context.Context, id string) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	resp, err := s.cli.Delete(ctx, Key(s.ns, id))
	if err != nil {
		return false, etcdFailed(err, "delete schedule %s", id)
	}
	return resp.Deleted > 0, nil
}

// SetPaused pauses or resumes schedule id. changed is false when it was
// in that state already (nothing is written).
func (s *Store) SetPaused(ctx context.Context, id string, paused bool) (Schedule, bool, error) {
	for range 10 {
		sch, err := s.Get(ctx, id)
		if err != nil {
			return Schedule{}, false, err
		}
		if sch.Paused == paused {
			return sch, false, nil
		}
		sch.Paused = paused
		now := s.now().UTC().Truncate(time.Millisecond)
		b, err := json.Marshal(stored{Spec: sch.Spec, CreatedAt: sch.CreatedAt, UpdatedAt: now})
		if err != nil {
			return Schedule{}, false, fmt.Errorf("encode schedule %s: %w", id, err)
		}
		key := Key(s.ns, id)
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", sch.Revision)).
			Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return Schedule{}, false, etcdFailed(err, "write schedule %s", id)
		}
		if resp.Succeeded {
			sch.UpdatedAt, sch.Revision = now, resp.Header.Revision
			return sch, true, nil
		}
	}
	return Schedule{}, false, fmt.Errorf("write schedule %s: %w", id, ErrBusy)
}

// State reads schedule id's scheduler state; ok is false when there is
// none yet.
func (s *Store) State(ctx context.Context, id string) (State, bool, error) {
	if err := ValidateID(id); err != nil {
		return State{}, false, err
	}
	resp, err := s.cli.Get(ctx, StateKey(s.ns, id))
	if err != nil {
		return State{}, false, etcdFailed(err, "read schedule state %s", id)
	}
	if len(resp.Kvs) == 0 {
		return State{}, false, nil
	}
	var st State
	if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
		return State{}, false, nil // a bad state is as good as none
	}
	return st, true, nil
}

// Snapshot is every schedule and every state at one etcd revision.
type Snapshot struct {
	Schedules map[string]Schedule
	States    map[string]State
	// Bad are the ids of schedule keys whose value did not decode (or
	// that are no schedule id).
	Bad []string
	// Rev is the revision read: a watch from Rev+1 sees every change
	// after it.
	Rev int64
}

// Load reads every schedule and every state in one transaction (one
// consistent revision).
func (s *Store) Load(ctx context.Context) (Snapshot, error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(Prefix(s.ns), clientv3.WithPrefix()),
		clientv3.OpGet(StatePrefix(s.ns), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return Snapshot{}, etcdFailed(err, "load schedules")
	}
	snap := Snapshot{States: map[string]State{}, Rev: resp.Header.Revision}
	snap.Schedules, snap.Bad = decodeAll(resp.Responses[0].GetResponseRange().Kvs, Prefix(s.ns))
	decodeStates(resp.Responses[1].GetResponseRange().Kvs, StatePrefix(s.ns), snap.States)
	return snap, nil
}

// maxTxnOps stays under etcd's default --max-txn-ops (128).
const maxTxnOps = 100

// ErrFenced is returned by WriteStates when the fence failed: the caller
// no longer holds the leadership it wrote under.
var ErrFenced = errors.New("not the scheduler leader any more")

// WriteStates writes and deletes states in transactions guarded by fence
// (the leader's election key still existing). Large writes go in chunks,
// each fenced; ErrFenced when a fence failed (the chunks before it were
// written, which is harmless: the states only move forward).
func (s *Store) WriteStates(ctx context.Context, fence clientv3.Cmp, put map[string]State, del []string) error {
	ops := make([]clientv3.Op, 0, len(put)+len(del))
	ids := make([]string, 0, len(put))
	for id := range put {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b, err := json.Marshal(put[id])
		if err != nil {
			return fmt.Errorf("encode schedule state %s: %w", id, err)
		}
		ops = append(ops, clientv3.OpPut(StateKey(s.ns, id), string(b)))
	}
	for _, id := range del {
		ops = append(ops, clientv3.OpDelete(StateKey(s.ns, id)))
	}
	for len(ops) > 0 {
		n := min(len(ops), maxTxnOps)
		resp, err := s.cli.Txn(ctx).If(fence).Then(ops[:n]...).Commit()
		if err != nil {
			return etcdFailed(err, "write schedule states")
		}
		if !resp.Succeeded {
			return ErrFenced
		}
		ops = ops[n:]
	}
	return nil
}
