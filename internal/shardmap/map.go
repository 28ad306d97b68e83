// Package shardmap owns the shard map of a namespace: how many shards it
// has, whether it is growing, and which shard a task id belongs to.
//
// The map is data, not configuration. Its source of truth is one etcd key
// per namespace (Key); every process watches it. Redis keeps a mirror and a
// per-shard stamp (package redisstore), which are the guard: a process that
// routes by an older map is refused by the shard it writes to and reloads.
//
// A map only grows, and only to a multiple of its count: with N = k*M,
// ShardOf(id, N) mod M == ShardOf(id, M), so every old shard o splits into
// the new shards o, o+M, ..., o+(k-1)M. Old shards are new shards too: a
// leader of shard o keeps firing what o holds while its tasks move out, and
// the tasks that move go only to shards >= M, which a process still routing
// by M never touches. See docs/design.md "Elastic shards".
package shardmap

import (
	"errors"
	"fmt"
	"hash/fnv"
)

// MaxShards is the largest shard count of a namespace.
const MaxShards = 4096

// States of a map.
const (
	Stable    = "stable"
	Migrating = "migrating"
)

// Map is one version of a namespace's shard map.
type Map struct {
	// Count is the number of shards. New tasks go to ShardOf(id, Count).
	Count int `json:"count"`
	// Previous is the count before the last growth (Count for a namespace
	// that never grew). While Migrating, a task may still live on
	// ShardOf(id, Previous).
	Previous int `json:"previous"`
	// State is Stable or Migrating.
	State string `json:"state"`
	// Epoch increases with every change of the map.
	Epoch int64 `json:"epoch"`
}

// Initial is the map of a new namespace of n shards.
func Initial(n int) Map { return Map{Count: n, Previous: n, State: Stable} }

// Migrating reports whether tasks are still moving to the new shards.
func (m Map) Migrating() bool { return m.State == Migrating }

// Shard is the shard of id under this map: where a new task goes.
func (m Map) Shard(id string) int { return ShardOf(id, m.Count) }

// Old is, while the map migrates, the shard id had under the previous
// count when that differs from Shard(id): the task may still live there.
func (m Map) Old(id string) (int, bool) {
	if !m.Migrating() || m.Previous == m.Count {
		return 0, false
	}
	o := ShardOf(id, m.Previous)
	if o == ShardOf(id, m.Count) {
		return 0, false
	}
	return o, true
}

// Newer reports whether m is a later version than o: a higher epoch, or
// the same growth finished (Migrating -> Stable).
func (m Map) Newer(o Map) bool {
	if m.Epoch != o.Epoch {
		return m.Epoch > o.Epoch
	}
	return o.Migrating() && !m.Migrating()
}

// Validate checks a map read from etcd or Redis.
func (m Map) Validate() error {
	switch {
	case m.Count < 1 || m.Count > MaxShards:
		return fmt.Errorf("shard map: count %d out of 1..%d", m.Count, MaxShards)
	case m.Previous < 1 || m.Previous > m.Count || m.Count%m.Previous != 0:
		return fmt.Errorf("shard map: previous %d does not divide count %d", m.Previous, m.Count)
	case m.State != Stable && m.State != Migrating:
		return fmt.Errorf("shard map: state %q", m.State)
	case m.Epoch < 0:
		return fmt.Errorf("shard map: epoch %d", m.Epoch)
	}
	return nil
}

// Errors of Grow.
var (
	// ErrMigrating: a growth is still in progress.
	ErrMigrating = errors.New("a shard migration is in progress")
	// ErrInvalidCount: the requested count cannot follow the current one.
	ErrInvalidCount = errors.New("invalid shard count")
	// ErrNoMap: the namespace has no shard map in etcd yet (the first
	// event process writes it).
	ErrNoMap = errors.New("the namespace has no shard map yet: start an event process first")
)

// CheckGrow tells whether the map may grow to n shards now.
func (m Map) CheckGrow(n int) error {
	switch {
	case m.Migrating():
		return fmt.Errorf("%w: growing from %d to %d shards", ErrMigrating, m.Previous, m.Count)
	case n <= m.Count:
		return fmt.Errorf("%w: count %d must be more than the current %d", ErrInvalidCount, n, m.Count)
	case n > MaxShards:
		return fmt.Errorf("%w: count %d must be at most %d", ErrInvalidCount, n, MaxShards)
	case n%m.Count != 0:
		return fmt.Errorf("%w: count %d must be a multiple of the current %d (every old shard splits into count/current new ones)", ErrInvalidCount, n, m.Count)
	}
	return nil
}

// Grown is the map growing to n shards (CheckGrow must have passed).
func (m Map) Grown(n int) Map {
	return Map{Count: n, Previous: m.Count, State: Migrating, Epoch: m.Epoch + 1}
}

// Settled is the map with its migration finished.
func (m Map) Settled() Map {
	m.State = Stable
	return m
}

// ShardOf is the shard of a task id among n: FNV-1a 32 of the id modulo n.
// It must never change: every process of a namespace has to agree on it.
func ShardOf(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}
