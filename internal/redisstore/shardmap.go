package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/shardmap"
)

// The Redis side of the shard map (package shardmap owns the map itself;
// etcd is its source of truth):
//   - the namespace's meta hash mirrors the map (fields shards, previous,
//     state, epoch), so that a process without etcd learns it;
//   - every shard's stamp key holds the map with the highest count a writer
//     of the shard routed by (check_map in common.lua): the guard that
//     refuses a process still routing by an older map.
// A growth publishes in this order: etcd, the mirror, the stamps of the
// old shards. A refused process adopts the map the stamp names.

// errStaleMap is the DQSTALEMAP refusal; staleMap carries the stamp.
var errStaleMap = errors.New("routed by an older shard map")

type staleMapError struct{ m shardmap.Map }

func (e *staleMapError) Error() string {
	return fmt.Sprintf("%v (the shard says %d shards, epoch %d)", errStaleMap, e.m.Count, e.m.Epoch)
}
func (e *staleMapError) Unwrap() error { return errStaleMap }

// asStaleMap recognises the script refusal "DQSTALEMAP <count>|<previous>|<epoch>".
func asStaleMap(err error) (shardmap.Map, bool) {
	if err == nil {
		return shardmap.Map{}, false
	}
	var sm *staleMapError
	if errors.As(err, &sm) {
		return sm.m, true
	}
	msg := err.Error()
	i := strings.Index(msg, "DQSTALEMAP ")
	if i < 0 {
		return shardmap.Map{}, false
	}
	f := strings.Fields(msg[i+len("DQSTALEMAP "):])
	if len(f) == 0 {
		return shardmap.Map{}, true
	}
	m, _ := parseStamp(f[0])
	return m, true
}

// stamp is a map as a stamp key and the scripts' map argument hold it.
func stamp(m shardmap.Map) string {
	return strconv.Itoa(m.Count) + "|" + strconv.Itoa(m.Previous) + "|" + strconv.FormatInt(m.Epoch, 10)
}

// parseStamp reads a stamp. A shard stamped by a growth is migrating as far
// as the stamp knows; the mirror or etcd tell when the growth settled.
func parseStamp(s string) (shardmap.Map, bool) {
	p := strings.Split(s, "|")
	if len(p) != 3 {
		return shardmap.Map{}, false
	}
	c, e1 := strconv.Atoi(p[0])
	pr, e2 := strconv.Atoi(p[1])
	ep, e3 := strconv.ParseInt(p[2], 10, 64)
	m := shardmap.Map{Count: c, Previous: pr, Epoch: ep, State: shardmap.Migrating}
	if pr == c {
		m.State = shardmap.Stable
	}
	if e1 != nil || e2 != nil || e3 != nil || m.Validate() != nil {
		return shardmap.Map{}, false
	}
	return m, true
}

// Map is the shard map the store routes by.
func (s *Store) Map() shardmap.Map { return *s.m.Load() }

// SetMap makes the store route by m if m is newer than its map (maps from
// etcd's watch, a mirror or a stamp arrive in any order). It reports
// whether it did.
func (s *Store) SetMap(m shardmap.Map) bool {
	if m.Validate() != nil {
		return false
	}
	for {
		cur := s.m.Load()
		if !m.Newer(*cur) {
			return false
		}
		if s.m.CompareAndSwap(cur, &m) {
			return true
		}
	}
}

//go:embed mirror.lua
var mirrorLua string

var mirrorScript = redis.NewScript(mirrorLua)

// PublishMap writes m to the namespace's mirror unless the mirror already
// holds a newer map, and adopts it. Processes that change the map call it
// after etcd accepted the change; event processes repeat it for every map
// they see, so a crash between etcd and Redis heals.
func (s *Store) PublishMap(ctx context.Context, m shardmap.Map) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if err := mirrorScript.Run(ctx, s.rdb, []string{s.k.meta}, m.Count, m.Previous, m.State, m.Epoch).Err(); err != nil {
		return fmt.Errorf("publish shard map: %w", err)
	}
	s.SetMap(m)
	return nil
}

// StampShards stamps shards with m (never lowering a stamp): after it, a
// process routing by an older map is refused on those shards. A growth
// stamps every old shard before any task moves.
func (s *Store) StampShards(ctx context.Context, m shardmap.Map, shards []int) error {
	v := stamp(m)
	cmds := make([]*redis.Cmd, len(shards))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sh := range shards {
			cmds[i] = stampScript.Eval(ctx, p, []string{s.k.stamp(sh)}, v)
		}
		return nil
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			if _, stale := asStaleMap(err); stale {
				continue // a later growth stamped it already
			}
			return fmt.Errorf("stamp shard %d: %w", shards[i], err)
		}
	}
	return nil
}

//go:embed stamp.lua
var stampLua string

var stampScript = script(stampLua)

// ReloadMap reads the mirror and adopts it when newer.
func (s *Store) ReloadMap(ctx context.Context) error {
	m, err := s.readMirror(ctx)
	if err != nil {
		return err
	}
	s.SetMap(m)
	s.reloaded.Store(time.Now().UnixNano())
	return nil
}

// readMirror reads the map from the meta hash. A namespace written before
// the map existed has only "shards": it never grew.
func (s *Store) readMirror(ctx context.Context) (shardmap.Map, error) {
	h, err := s.rdb.HGetAll(ctx, s.k.meta).Result()
	if err != nil {
		return shardmap.Map{}, fmt.Errorf("read namespace meta: %w", err)
	}
	return mirrorMap(h)
}

func mirrorMap(h map[string]string) (shardmap.Map, error) {
	c, err := strconv.Atoi(h["shards"])
	if err != nil {
		return shardmap.Map{}, fmt.Errorf("namespace meta: shards %q", h["shards"])
	}
	m := shardmap.Initial(c)
	if v, ok := h["previous"]; ok {
		m.Previous, _ = strconv.Atoi(v)
		m.State = h["state"]
		m.Epoch, _ = strconv.ParseInt(h["epoch"], 10, 64)
	}
	return m, m.Validate()
}

// mapReloadEvery bounds how long a store that learned of a growth from a
// stamp (or has no etcd watch) routes as "migrating" after it settled.
const mapReloadEvery = 2 * time.Second

// routed runs an operation that routes by the map, again with a newer map
// when a shard refuses it as stale (at most a few times: maps only grow).
func (s *Store) routed(ctx context.Context, op func(m shardmap.Map) error) error {
	if m := s.Map(); m.Migrating() && time.Since(time.Unix(0, s.reloaded.Load())) > mapReloadEvery {
		_ = s.ReloadMap(ctx) // best effort: a failure leaves the current map, still correct
	}
	for attempt := 0; ; attempt++ {
		err := op(s.Map())
		nm, stale := asStaleMap(err)
		if !stale || attempt == 4 {
			return err
		}
		if rerr := s.adoptStale(ctx, nm); rerr != nil {
			return rerr
		}
	}
}

// adoptStale moves the store to the map a DQSTALEMAP refusal named, or,
// when the refusal named none the store can take, to the mirror's.
func (s *Store) adoptStale(ctx context.Context, nm shardmap.Map) error {
	if s.SetMap(nm) {
		return nil
	}
	return s.ReloadMap(ctx)
}

// Progress is one growth's figures, summed over the old shards.
type Progress struct {
	Moved     int64 // tasks moved to their new shard
	Remaining int64 // tasks still on an old shard they no longer belong to (last count of each mover)
}

// GrowProgress sums the movers' figures of growth m.
func (s *Store) GrowProgress(ctx context.Context, m shardmap.Map) (Progress, error) {
	cmds := make([]*redis.MapStringStringCmd, m.Previous)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for o := range m.Previous {
			cmds[o] = p.HGetAll(ctx, s.k.progress(o))
		}
		return nil
	})
	if err != nil {
		return Progress{}, fmt.Errorf("read growth progress: %w", err)
	}
	var pr Progress
	ep := strconv.FormatInt(m.Epoch, 10)
	for _, c := range cmds {
		h := c.Val()
		if h["epoch"] != ep {
			continue
		}
		mv, _ := strconv.ParseInt(h["moved"], 10, 64)
		rem, _ := strconv.ParseInt(h["remaining"], 10, 64)
		pr.Moved += mv
		pr.Remaining += rem
	}
	return pr, nil
}
