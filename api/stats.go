package api

import "time"

// Stats are the daemon's figures (GET /v1/stats). The daemon answers them
// also while Redis is down: RedisError says why the shard figures are
// missing, JournalDepth how many schedules wait in its journal.
type Stats struct {
	Namespace  string `json:"namespace"`
	ShardCount int    `json:"shard_count"`
	RedisUp    bool   `json:"redis_up"`
	RedisError string `json:"redis_error,omitempty"`
	// ShardsDown are the shards whose Redis Cluster master is known down:
	// their schedules are journaled without trying them.
	ShardsDown   []int        `json:"shards_down"`
	JournalDepth int          `json:"journal_depth"`
	Totals       StatsTotals  `json:"totals"`
	Shards       []ShardStats `json:"shards"`
}

// StatsTotals are the sums of the shards' figures.
type StatsTotals struct {
	Scheduled int64 `json:"scheduled"`
	Firing    int64 `json:"firing"`
	Dead      int64 `json:"dead"`
}

// ShardStats are one shard's figures.
type ShardStats struct {
	Shard     int   `json:"shard"`
	Scheduled int64 `json:"scheduled"` // waiting to fire: scheduled or retrying, parked ones included
	Firing    int64 `json:"firing"`    // taken by the shard's leader, not settled yet
	Dead      int64 `json:"dead"`
	// EarliestDue is the due time of the earliest waiting task, unless it
	// is parked (nil then, and when none waits).
	EarliestDue *time.Time `json:"earliest_due,omitempty"`
	LeaderToken int64      `json:"leader_token"`
	Overdue     int64      `json:"overdue"` // waiting tasks due in the past (parked ones excluded)
	// OldestOverdueSeconds is how late the earliest overdue task is; 0
	// when none is.
	OldestOverdueSeconds float64 `json:"oldest_overdue_seconds"`
	Paused               int64   `json:"paused"` // parked tasks of paused types
}
