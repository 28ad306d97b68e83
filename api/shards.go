package api

// Shard map states (ShardMap.State).
const (
	ShardsStable    = "stable"
	ShardsMigrating = "migrating"
)

// ShardMap is the namespace's shard count and the state of its growth, as
// GET /v1/shards and PUT /v1/shards answer it.
type ShardMap struct {
	// Count is the namespace's shard count: while a migration runs, the
	// count it grows to (new tasks already land on the new map).
	Count int `json:"count"`
	// Previous is the count before the last growth: while migrating, the
	// count being grown from; equal to Count for a namespace that never
	// grew.
	Previous int `json:"previous"`
	// State is ShardsStable or ShardsMigrating.
	State string `json:"state"`
	// Epoch numbers the shard maps the namespace has had; each growth
	// publishes the next one.
	Epoch int64 `json:"epoch"`
	// Moved and Remaining count the tasks the running migration has moved
	// to their new shard and has still to move; when stable, those of the
	// last migration (Remaining 0).
	Moved     int64 `json:"moved"`
	Remaining int64 `json:"remaining"`
}

// Migrating reports whether a growth is in progress.
func (m ShardMap) Migrating() bool { return m.State == ShardsMigrating }

// Progress is the share of the migration's tasks moved so far, 0 to 1:
// Moved / (Moved + Remaining), 1 when stable, and 0 while migrating with
// nothing counted yet.
func (m ShardMap) Progress() float64 {
	if !m.Migrating() {
		return 1
	}
	total := m.Moved + m.Remaining
	if total <= 0 {
		return 0
	}
	return float64(m.Moved) / float64(total)
}

// GrowShards is the body of PUT /v1/shards.
type GrowShards struct {
	Count int `json:"count"`
}
