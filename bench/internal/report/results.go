// Package report holds the comparison's results and writes them out: the
// JSON file, the Markdown section of docs/benchmarks.md (between the
// compare markers, nothing else in the file is touched) and the charts.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/delayq/delayq/bench/internal/stats"
)

// Results is everything one run measured.
type Results struct {
	Machine    Machine      `json:"machine"`
	Command    string       `json:"command"`
	Short      bool         `json:"short"`
	Started    time.Time    `json:"started"`
	ElapsedS   float64      `json:"elapsed_s"`
	Settings   []string     `json:"settings"`
	Throughput []Throughput `json:"throughput"`
	// Rounds are the single-task rows measured again (compare -rounds
	// N), round 2 on; round 1 is Throughput itself. See SingleRatios.
	Rounds   []Round    `json:"single_task_rounds,omitempty"`
	Memory   []Memory   `json:"memory"`
	Steady   []Lag      `json:"steady"`
	Spike    []Spike    `json:"spike"`
	Churn    []Churn    `json:"churn"`
	Handling []Handling `json:"handling"`
	Notes    []string   `json:"notes"`
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs         int    `json:"cpus"`
	CPUModel     string `json:"cpu_model"`
	OS           string `json:"os"`
	GoVersion    string `json:"go_version"`
	RedisVersion string `json:"redis_version"`
	AsynqVersion string `json:"asynq_version"`
	LoadStart    string `json:"load_average_start"`
	LoadEnd      string `json:"load_average_end"`
}

// Throughput is one scheduling method (workload 1).
type Throughput struct {
	System      string  `json:"system"`
	Method      string  `json:"method"`
	Label       string  `json:"label"` // short, for the chart
	Tasks       int     `json:"tasks"`
	Workers     int     `json:"workers"`
	PerCall     int     `json:"tasks_per_call"`
	TasksPerSec float64 `json:"tasks_per_s"`
	CallP50ms   float64 `json:"call_p50_ms"`
	CallP99ms   float64 `json:"call_p99_ms"`
	Errors      int     `json:"errors"`
	Stored      int64   `json:"stored"` // tasks found in Redis afterwards
	// CPU per task while the calls ran (µs): redis-server (INFO cpu), and
	// the bench process (getrusage: the load generator with whatever the
	// system runs in it: the daemon for delayq's API rows, the producer's
	// daemon for embedded, asynq's client).
	RedisCPUus float64 `json:"redis_cpu_us_per_task"`
	ProcCPUus  float64 `json:"process_cpu_us_per_task"`
}

// Round is one more measurement of the single-task rows of Throughput
// (compare -rounds N): the same rows, in an order that alternates which
// system goes first from round to round.
type Round struct {
	Round int          `json:"round"`
	Rows  []Throughput `json:"rows"`
}

// Memory is Redis bytes per pending task (workload 2).
type Memory struct {
	System       string  `json:"system"`
	Tasks        int     `json:"tasks"`
	Stored       int64   `json:"stored"`
	UsedBefore   int64   `json:"used_memory_before"`
	UsedAfter    int64   `json:"used_memory_after"`
	BytesPerTask float64 `json:"bytes_per_task"`
	TasksPerSec  float64 `json:"tasks_per_s"`
	Method       string  `json:"method"`
}

// Lag is one steady-load firing run (workload 3).
type Lag struct {
	System       string         `json:"system"`
	Config       string         `json:"config"`
	Rate         int            `json:"rate_per_s"`
	DurationS    float64        `json:"duration_s"`
	AheadS       float64        `json:"ahead_s"`
	Scheduled    int            `json:"scheduled"`
	SendErrors   int            `json:"send_errors"`
	ScheduleRate float64        `json:"achieved_schedule_rate"`
	LateSends    int            `json:"sends_done_after_due"` // tasks whose schedule call returned after their due time
	MeasuredAt   string         `json:"lag_measured_at"`
	Lag          stats.Summary  `json:"lag"`
	RecordTS     *stats.Summary `json:"lag_at_record_timestamp,omitempty"`
	Transit      *stats.Summary `json:"transit_record_timestamp_to_consumer,omitempty"`
	Missing      int            `json:"missing"`
	Duplicates   int            `json:"duplicates"`
	CDF          []stats.Point  `json:"cdf"`
}

// Spike is one "all due at once" run (workloads 4 and 6).
type Spike struct {
	System     string        `json:"system"`
	Config     string        `json:"config"`
	Events     int           `json:"event_processes,omitempty"`
	Tasks      int           `json:"tasks"`
	ScheduleS  float64       `json:"schedule_s"`
	SlackS     float64       `json:"slack_s"`             // due instant - end of scheduling
	FirstS     float64       `json:"first_s"`             // first task visible - due instant
	DrainS     float64       `json:"drain_s"`             // last task visible - due instant
	DrainRate  float64       `json:"drain_tasks_per_s"`   // tasks / drain
	FlowRate   float64       `json:"first_to_last_per_s"` // tasks / (last - first visible)
	RedisCPU   float64       `json:"redis_cpu_cores"`     // redis-server CPU time / (last visible - due)
	MeasuredAt string        `json:"lag_measured_at"`
	Lag        stats.Summary `json:"lag"`
	Missing    int           `json:"missing"`
	Duplicates int           `json:"duplicates"`
	CDF        []stats.Point `json:"cdf"`
}

// Churn is one cancel/reschedule run (workload 5).
type Churn struct {
	System         string  `json:"system"`
	Tasks          int     `json:"tasks"`
	Cancelled      int     `json:"cancelled"`
	Rescheduled    int     `json:"rescheduled"`
	RescheduleHow  string  `json:"reschedule_how"`
	OpsPerSec      float64 `json:"ops_per_s"`
	OpErrors       int     `json:"op_errors"`
	OpsBeforeDue   bool    `json:"ops_done_before_first_due"`
	CancelledFired int     `json:"cancelled_fired"`
	ReschedOnce    int     `json:"rescheduled_fired_once_on_time"`
	ReschedTwice   int     `json:"rescheduled_fired_more_than_once"`
	ReschedEarly   int     `json:"rescheduled_fired_early"`       // before the new due time, less than 1s
	ReschedOldTime int     `json:"rescheduled_fired_at_old_time"` // 1s or more before the new due time
	ReschedMissing int     `json:"rescheduled_missing"`
	KeptMissing    int     `json:"kept_missing"`
	KeptEarly      int     `json:"kept_early"`
	Duplicates     int     `json:"duplicates"`
	LagP99ms       float64 `json:"lag_p99_ms"`
}

// Handling is one run of workload 7 (no-op handler): a consumer draining
// tasks that are ready (Phase PhaseReady; System kafka-go is the bare
// kafka-go Reader of the same records, for reference), or tasks scheduled
// due now and handled, end to end (PhaseE2E).
type Handling struct {
	System      string `json:"system"`
	Phase       string `json:"phase"`
	Label       string `json:"label"` // short, for the chart
	Method      string `json:"method"`
	Tasks       int    `json:"tasks"`
	Concurrency int    `json:"concurrency,omitempty"`
	// TasksPerSec: ready, first to N-th handler call (kafka-go: first to
	// N-th record); end to end, N / (N-th handler call - first schedule
	// call).
	TasksPerSec float64 `json:"tasks_per_s"`
	// FirstS: ready, consumer start to first handler call; end to end,
	// first schedule call to first handler call.
	FirstS float64 `json:"first_s"`
	// StoredMs: N-th handler call to every outcome stored in Redis
	// (delayq: the N-th Config.OnOutcome; asynq: the queue found empty).
	StoredMs float64 `json:"stored_after_ms"`
	// ScheduleS and ScheduleRate: end to end, how long scheduling took.
	ScheduleS    float64 `json:"schedule_s,omitempty"`
	ScheduleRate float64 `json:"schedule_tasks_per_s,omitempty"`
	// CPU per task: redis-server (INFO cpu) and this process (getrusage)
	// from the consumer's start (end to end: the first schedule call) to
	// every outcome stored, divided by Tasks; µs.
	RedisCPUus float64 `json:"redis_cpu_us_per_task"`
	ProcCPUus  float64 `json:"process_cpu_us_per_task"`
	Handled    int     `json:"handled"`    // distinct tasks handled
	Duplicates int     `json:"duplicates"` // handler calls beyond the first per task
	Errors     int     `json:"errors"`     // failed schedule calls (end to end)
}

// WriteJSON writes r to path (directories created).
func WriteJSON(path string, r *Results) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
