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
}

// NewStore is the store of namespace ns.
func NewStore(cli *clientv3.Client, ns string) *Store {
	return &Store{cli: cli, ns: ns, now: time.Now}
}

// Put creates or replaces schedule id. The spec is validated first (a
// *FieldError, nothing written). CreatedAt is kept across replacements.
// Putting the spec a schedule already has writes nothing (its revision,
// and with it the scheduler's catch-up of missed ticks, stays).
func (s *Store) Put(ctx context.Context, id string, spec Spec) (Schedule, bool, error) {
	if err := ValidateID(id); err != nil {
		return Schedule{}, false, err
	}
	if err := spec.Validate(); err != nil {
		return Schedule{}, false, err
	}
	key := Key(s.ns, id)
	for range 10 {
		get, err := s.cli.Get(ctx, key)
		if err != nil {
			return Schedule{}, false, fmt.Errorf("read schedule %s: %w", id, err)
		}
		now := s.now().UTC().Truncate(time.Millisecond)
		v := stored{Spec: spec, CreatedAt: now, UpdatedAt: now}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
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
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return Schedule{}, false, fmt.Errorf("encode schedule %s: %w", id, err)
		}
		if len(b) > MaxSpecBytes {
			return Schedule{}, false, invalid("task.payload", "the schedule is %d bytes encoded; at most %d", len(b), MaxSpecBytes)
		}
		resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return Schedule{}, false, fmt.Errorf("write schedule %s: %w", id, err)
		}
		if resp.Succeeded {
			return Schedule{ID: id, Spec: spec, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Revision: resp.Header.Revision}, created, nil
		}
	}
	return Schedule{}, false, fmt.Errorf("write schedule %s: changed concurrently too often, try again", id)
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
		return Schedule{}, fmt.Errorf("read schedule %s: %w", id, err)
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

// List reads every schedule, sorted by id. A value that does not decode
// (written by hand) is left out; bad is how many were.
func (s *Store) List(ctx context.Context) (list []Schedule, bad int, err error) {
	resp, err := s.cli.Get(ctx, Prefix(s.ns), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list schedules: %w", err)
	}
	m, bad := decodeAll(resp.Kvs, Prefix(s.ns))
	for _, sch := range m {
		list = append(list, sch)
	}
	slices.SortFunc(list, func(a, b Schedule) int { return strings.Compare(a.ID, b.ID) })
	return list, bad, nil
}

func decodeAll(kvs []*mvccpb.KeyValue, prefix string) (map[string]Schedule, int) {
	m := make(map[string]Schedule, len(kvs))
	bad := 0
	for _, kv := range kvs {
		id := strings.TrimPrefix(string(kv.Key), prefix)
		sch, err := decode(id, kv.Value, kv.ModRevision)
		if err != nil || ValidateID(id) != nil {
			bad++
			continue
		}
		m[id] = sch
	}
	return m, bad
}

// Delete removes schedule id; deleted is false when there was none. Its
// ticks materialized ahead of time are cancelled by the scheduler.
func (s *Store) Delete(ctx context.Context, id string) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	resp, err := s.cli.Delete(ctx, Key(s.ns, id))
	if err != nil {
		return false, fmt.Errorf("delete schedule %s: %w", id, err)
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
			return Schedule{}, false, fmt.Errorf("write schedule %s: %w", id, err)
		}
		if resp.Succeeded {
			sch.UpdatedAt, sch.Revision = now, resp.Header.Revision
			return sch, true, nil
		}
	}
	return Schedule{}, false, fmt.Errorf("write schedule %s: changed concurrently too often, try again", id)
}

// State reads schedule id's scheduler state; ok is false when there is
// none yet.
func (s *Store) State(ctx context.Context, id string) (State, bool, error) {
	if err := ValidateID(id); err != nil {
		return State{}, false, err
	}
	resp, err := s.cli.Get(ctx, StateKey(s.ns, id))
	if err != nil {
		return State{}, false, fmt.Errorf("read schedule state %s: %w", id, err)
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

// Load reads every schedule and every state in one transaction (one
// consistent revision). bad counts schedule values that did not decode.
func (s *Store) Load(ctx context.Context) (schedules map[string]Schedule, states map[string]State, bad int, err error) {
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(Prefix(s.ns), clientv3.WithPrefix()),
		clientv3.OpGet(StatePrefix(s.ns), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("load schedules: %w", err)
	}
	schedules, bad = decodeAll(resp.Responses[0].GetResponseRange().Kvs, Prefix(s.ns))
	states = make(map[string]State)
	sp := StatePrefix(s.ns)
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var st State
		if json.Unmarshal(kv.Value, &st) == nil {
			states[strings.TrimPrefix(string(kv.Key), sp)] = st
		}
	}
	return schedules, states, bad, nil
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
			return fmt.Errorf("write schedule states: %w", err)
		}
		if !resp.Succeeded {
			return ErrFenced
		}
		ops = ops[n:]
	}
	return nil
}
