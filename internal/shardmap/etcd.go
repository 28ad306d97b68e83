package shardmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key is the etcd key of a namespace's shard map (JSON of Map).
func Key(ns string) string { return "/" + ns + "/shardmap" }

// donePrefix holds one key per old shard that has moved out every task of a
// growth: <donePrefix(ns, epoch)><shard>.
func donePrefix(ns string, epoch int64) string {
	return "/" + ns + "/shardmap-done/" + strconv.FormatInt(epoch, 10) + "/"
}

// Etcd reads and changes a namespace's map in etcd.
type Etcd struct {
	Client    *clientv3.Client
	Namespace string
}

// Load reads the map; ok is false when the namespace has none yet.
func (e Etcd) Load(ctx context.Context) (m Map, rev int64, ok bool, err error) {
	r, err := e.Client.Get(ctx, Key(e.Namespace))
	if err != nil {
		return Map{}, 0, false, fmt.Errorf("read shard map: %w", err)
	}
	if len(r.Kvs) == 0 {
		return Map{}, r.Header.Revision, false, nil
	}
	m, err = decode(r.Kvs[0].Value)
	return m, r.Kvs[0].ModRevision, err == nil, err
}

func decode(b []byte) (Map, error) {
	var m Map
	if err := json.Unmarshal(b, &m); err != nil {
		return Map{}, fmt.Errorf("shard map: %w", err)
	}
	return m, m.Validate()
}

func encode(m Map) string {
	b, _ := json.Marshal(m) //nolint:errchkjson // a struct of ints and a string
	return string(b)
}

// Ensure returns the namespace's map, creating it as initial when there is
// none (the first process of a namespace decides its initial count;
// initial is what Redis already records for a namespace older than the map).
func (e Etcd) Ensure(ctx context.Context, initial Map) (Map, error) {
	if err := initial.Validate(); err != nil {
		return Map{}, err
	}
	k := Key(e.Namespace)
	r, err := e.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, encode(initial))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return Map{}, fmt.Errorf("create shard map: %w", err)
	}
	if r.Succeeded {
		return initial, nil
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return Map{}, errors.New("shard map vanished while created")
	}
	return decode(kvs[0].Value)
}

// Grow starts growing the map to n shards, atomically against any other
// change. It returns the new map, or ErrMigrating / ErrInvalidCount
// (wrapped) when the current map does not allow it.
func (e Etcd) Grow(ctx context.Context, n int) (Map, error) {
	for {
		cur, rev, ok, err := e.Load(ctx)
		if err != nil {
			return Map{}, err
		}
		if !ok {
			return Map{}, ErrNoMap
		}
		if err := cur.CheckGrow(n); err != nil {
			return cur, err
		}
		next := cur.Grown(n)
		k := Key(e.Namespace)
		r, err := e.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, encode(next))).Commit()
		if err != nil {
			return Map{}, fmt.Errorf("grow shard map: %w", err)
		}
		if r.Succeeded {
			return next, nil
		}
		// changed meanwhile: judge again against the new map
	}
}

// MarkDone records that old shard has moved out every task of the growth
// to m, and settles the map when every old shard has. It reports whether
// this call settled it.
func (e Etcd) MarkDone(ctx context.Context, m Map, shard int) (bool, error) {
	p := donePrefix(e.Namespace, m.Epoch)
	if _, err := e.Client.Put(ctx, p+strconv.Itoa(shard), "1"); err != nil {
		return false, fmt.Errorf("mark shard %d moved out: %w", shard, err)
	}
	r, err := e.Client.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("count moved-out shards: %w", err)
	}
	if int(r.Count) < m.Previous {
		return false, nil
	}
	k := Key(e.Namespace)
	tr, err := e.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(k), "=", encode(m))).
		Then(clientv3.OpPut(k, encode(m.Settled())), clientv3.OpDelete(p, clientv3.WithPrefix())).
		Commit()
	if err != nil {
		return false, fmt.Errorf("settle shard map: %w", err)
	}
	return tr.Succeeded, nil
}

// Done reports which old shards have finished moving out for m.
func (e Etcd) Done(ctx context.Context, m Map) (map[int]bool, error) {
	p := donePrefix(e.Namespace, m.Epoch)
	r, err := e.Client.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("read moved-out shards: %w", err)
	}
	out := make(map[int]bool, len(r.Kvs))
	for _, kv := range r.Kvs {
		if s, err := strconv.Atoi(string(kv.Key[len(p):])); err == nil {
			out[s] = true
		}
	}
	return out, nil
}

// Watch calls fn with the current map and with every change until ctx
// ends. It reconnects on its own; errors of a reload are passed to onErr
// (may be nil).
func (e Etcd) Watch(ctx context.Context, fn func(Map), onErr func(error)) {
	k := Key(e.Namespace)
	for ctx.Err() == nil {
		m, rev, ok, err := e.Load(ctx)
		if err != nil {
			if onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
			select {
			case <-ctx.Done():
				return
			case <-timeAfter():
			}
			continue
		}
		if ok {
			fn(m)
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range e.Client.Watch(wctx, k, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if m, err := decode(ev.Kv.Value); err == nil {
					fn(m)
				} else if onErr != nil {
					onErr(err)
				}
			}
		}
		cancel()
	}
}
