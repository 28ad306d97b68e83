package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// timeLayout is how the daemon writes times: RFC 3339 with milliseconds,
// in UTC.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Cluster is the state of the whole system as the daemon sees it (GET
// /v1/cluster). Parts it could not read are empty and named in
// RedisError or EtcdError.
type Cluster struct {
	Namespace    string         `json:"namespace"`
	ShardCount   int            `json:"shard_count"`
	Shards       []ClusterShard `json:"shards"`
	Processes    []Process      `json:"processes"`
	WorkedTopics []WorkedTopic  `json:"worked_topics"`
	JournalDepth int            `json:"journal_depth"`
	RedisUp      bool           `json:"redis_up"`
	RedisError   string         `json:"redis_error,omitempty"`
	EtcdError    string         `json:"etcd_error,omitempty"`
}

// ClusterShard is one shard in Cluster.
type ClusterShard struct {
	Shard       int     `json:"shard"`
	Leader      *Leader `json:"leader"` // nil: no process leads the shard
	LeaderToken int64   `json:"leader_token"`
	Pending     int64   `json:"pending"` // tasks waiting to fire
	Overdue     int64   `json:"overdue"` // of those, due in the past
	// OldestOverdueSeconds is how late the earliest overdue task is; 0
	// when none is.
	OldestOverdueSeconds float64 `json:"oldest_overdue_seconds"`
	Paused               int64   `json:"paused"` // parked tasks of paused types
	Firing               int64   `json:"firing"`
	Dead                 int64   `json:"dead"`
}

// OldestOverdue is OldestOverdueSeconds as a duration.
func (s ClusterShard) OldestOverdue() time.Duration {
	return time.Duration(s.OldestOverdueSeconds * float64(time.Second))
}

// Leader is the process leading a shard.
type Leader struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// Process is one running daemon, event or work process.
type Process struct {
	ID        string
	Kind      string // daemon, event or work
	Version   string
	Addr      string // its admin HTTP address
	Ready     bool
	Reason    string    // why it is not ready
	StartedAt time.Time // zero when unknown
	// Counters are the process's own totals as of AsOf, its last registry
	// write (about every 5 s); nil when it published none.
	Counters map[string]float64
	AsOf     time.Time
}

// processJSON is Process's JSON form: times in RFC 3339 with
// milliseconds, left out when zero, as the other empty parts.
type processJSON struct {
	ID        string             `json:"id"`
	Kind      string             `json:"kind"`
	Version   string             `json:"version"`
	Addr      string             `json:"addr"`
	Ready     bool               `json:"ready"`
	Reason    string             `json:"reason,omitempty"`
	StartedAt string             `json:"started_at,omitempty"`
	Counters  map[string]float64 `json:"counters,omitempty"`
	AsOf      string             `json:"as_of,omitempty"`
}

// MarshalJSON writes p as GET /v1/cluster shows it.
func (p Process) MarshalJSON() ([]byte, error) {
	return json.Marshal(processJSON{ID: p.ID, Kind: p.Kind, Version: p.Version, Addr: p.Addr, Ready: p.Ready,
		Reason: p.Reason, StartedAt: formatTime(p.StartedAt), Counters: p.Counters, AsOf: formatTime(p.AsOf)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Process) UnmarshalJSON(b []byte) error {
	var v processJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Process{ID: v.ID, Kind: v.Kind, Version: v.Version, Addr: v.Addr, Ready: v.Ready, Reason: v.Reason, Counters: v.Counters}
	var err error
	if out.StartedAt, err = parseTime(v.StartedAt); err != nil {
		return fmt.Errorf("process %q: started_at: %w", v.ID, err)
	}
	if out.AsOf, err = parseTime(v.AsOf); err != nil {
		return fmt.Errorf("process %q: as_of: %w", v.ID, err)
	}
	*p = out
	return nil
}

// WorkedTopic is a Kafka topic that delayq work processes declared they
// consume (in Cluster): a task fired to it stays fired until a worker
// finishes it, while a task fired to any other topic ends "delivered" once
// Kafka acknowledged its record. The declaration outlives the processes;
// DELETE /v1/cluster/worked/{topic} removes it.
type WorkedTopic struct {
	Topic string
	Group string    // the consumer group of the first declaration
	Since time.Time // when it was first declared; zero when unknown
	By    string    // the process id of the first declaration
}

type workedTopicJSON struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
	Since string `json:"since"`
	By    string `json:"by"`
}

// MarshalJSON writes since in RFC 3339 with milliseconds ("" when
// unknown).
func (w WorkedTopic) MarshalJSON() ([]byte, error) {
	return json.Marshal(workedTopicJSON{Topic: w.Topic, Group: w.Group, Since: formatTime(w.Since), By: w.By})
}

// UnmarshalJSON reads since, which is empty when unknown.
func (w *WorkedTopic) UnmarshalJSON(b []byte) error {
	var v workedTopicJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	since, err := parseTime(v.Since)
	if err != nil {
		return fmt.Errorf("worked topic %q: since: %w", v.Topic, err)
	}
	*w = WorkedTopic{Topic: v.Topic, Group: v.Group, Since: since, By: v.By}
	return nil
}

// ForgottenTopic is the answer of DELETE /v1/cluster/worked/{topic}.
type ForgottenTopic struct {
	Topic     string `json:"topic"`
	Forgotten bool   `json:"forgotten"` // false: it was not worked
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}
