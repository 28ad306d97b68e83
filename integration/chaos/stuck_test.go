package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The "none stuck" promise: every task a daemon accepted reaches a state
// an operator can see as an end (succeeded, dead, cancelled), or still
// waits for a due time in the future. A task that is fired, overdue or
// journaled long after every fault healed is stuck, whatever Kafka holds.

// Poison tasks are scheduled by the nemesis, outside the workload's
// history: a task whose topic does not exist, and one whose record is
// larger than the tasks topic accepts (the topic's max.message.bytes is
// lowered below the daemon's DQ_MAX_RECORD_BYTES, the misconfiguration a
// user meets when a topic's limit is smaller than the broker default).
// Each must end dead, with a reason naming its cause, within the poison
// grace plus the time the checker allows; none may wedge its shard.
const (
	poisonGrace      = 2 * time.Second // DQ_FIRE_POISON_GRACE of the event processes
	tasksTopicMaxMsg = 64 << 10        // max.message.bytes of the tasks topic in a run
	oversizedPayload = 96 << 10        // larger than the topic takes, smaller than the daemon's limits
)

type poisonKind string

const (
	poisonMissingTopic poisonKind = "missing topic"
	poisonOversized    poisonKind = "oversized record"
)

// poisonTask is one task the nemesis scheduled to fail at fire.
type poisonTask struct {
	id, topic string
	kind      poisonKind
	status    int // the daemon's answer to the schedule
}

// poisonLog collects the nemesis' poison tasks.
type poisonLog struct {
	mu    sync.Mutex
	tasks []poisonTask
}

func (l *poisonLog) add(p poisonTask) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tasks = append(l.tasks, p)
}

func (l *poisonLog) snapshot() []poisonTask {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.tasks)
}

// schedulePoison schedules one poison task of kind through a daemon, due
// at once. It reports whether a daemon accepted it (a daemon that is down
// or cut off is no failure of the run: the nemesis tries another time).
func (c *cluster) schedulePoison(kind poisonKind, n int) (poisonTask, bool) {
	p := poisonTask{id: fmt.Sprintf("poison-%d-%03d", c.cfg.Seed%1_000_000, n), kind: kind, topic: tasksTopic}
	body := map[string]any{"id": p.id, "type": "chaos.poison", "delay": "0s"}
	switch kind {
	case poisonMissingTopic:
		p.topic = fmt.Sprintf("chaos.missing.%d", n)
		body["topic"] = p.topic
		body["payload"] = map[string]int{"n": n}
	case poisonOversized:
		body["payload"] = map[string]string{"blob": strings.Repeat("x", oversizedPayload)}
	}
	b, _ := json.Marshal(body)
	hc := &http.Client{Timeout: 3 * time.Second}
	for _, base := range c.daemonURLs() {
		resp, err := hc.Post(base+"/v1/tasks", "application/json", strings.NewReader(string(b)))
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.status = resp.StatusCode
		if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted {
			return p, true
		}
	}
	return p, false
}

// limitTopicMessageBytes lowers the tasks topic's max.message.bytes, so
// that an oversized task passes the daemon's checks and meets Kafka's.
func (c *cluster) limitTopicMessageBytes(tb testing.TB, topic string, n int) {
	tb.Helper()
	cl := c.kafka.Client(tb)
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = "max.message.bytes"
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	cfg.Value = kmsg.StringPtr(fmt.Sprint(n))
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(tb.Context(), cl)
	if err == nil && len(resp.Resources) == 1 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		tb.Fatalf("chaos: set max.message.bytes of %s: %v", topic, err)
	}
}

// taskState is what GET /v1/tasks/{id} says of a task.
type taskState struct {
	found     bool
	state     string
	dueAt     time.Time
	lastError string
}

func (c *cluster) getTask(hc *http.Client, id string) (taskState, error) {
	var lastErr error
	for _, base := range c.daemonURLs() {
		resp, err := hc.Get(base + "/v1/tasks/" + id)
		if err != nil {
			lastErr = err
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		switch {
		case err != nil:
			lastErr = err
		case resp.StatusCode == http.StatusNotFound:
			return taskState{}, nil
		case resp.StatusCode != http.StatusOK:
			lastErr = fmt.Errorf("GET %s: %d %s", id, resp.StatusCode, strings.TrimSpace(string(b[:min(len(b), 200)])))
		default:
			var v struct {
				State     string `json:"state"`
				DueAt     string `json:"due_at"`
				LastError string `json:"last_error"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				return taskState{}, fmt.Errorf("GET %s: %w", id, err)
			}
			due, _ := time.Parse(time.RFC3339Nano, v.DueAt)
			return taskState{found: true, state: v.State, dueAt: due, lastError: v.LastError}, nil
		}
	}
	return taskState{}, lastErr
}

// stuckVerdict is the outcome of checkNoneStuck.
type stuckVerdict struct {
	checked  int
	byState  map[string]int
	poison   int
	stuck    []string
	took     time.Duration
	deadline time.Duration
}

func (v *stuckVerdict) line() string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range v.byState {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v.byState[k]))
	}
	return fmt.Sprintf("%d tasks + %d poison checked in %s (bound %s): %s; stuck %d",
		v.checked, v.poison, v.took.Round(100*time.Millisecond), v.deadline, strings.Join(parts, " "), len(v.stuck))
}

// endedOrWaiting says whether s is an end an operator can see, or a wait
// for a due time still ahead.
func endedOrWaiting(s taskState, now time.Time) bool {
	switch s.state {
	case "succeeded", "dead", "cancelled":
		return true
	case "scheduled", "retrying":
		return s.dueAt.After(now)
	}
	return false
}

// checkNoneStuck asks the daemons for every task the workload may have
// created and every poison task, until each has ended (or waits for a
// future due time) or bound passed. Accepted tasks must exist; a task
// whose schedule was refused or whose outcome is unknown may not exist, but
// if it does, the same rule holds. Poison tasks must be dead with a
// reason that names their cause.
func checkNoneStuck(t *testing.T, c *cluster, tasks []taskHist, poison []poisonTask, bound time.Duration) *stuckVerdict {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	v := &stuckVerdict{byState: map[string]int{}, deadline: bound, poison: len(poison)}
	type pending struct {
		id       string
		accepted bool
		poison   *poisonTask
	}
	var todo []pending
	for i := range tasks {
		s := tasks[i].ops[0]
		todo = append(todo, pending{id: tasks[i].id, accepted: s.out == ok})
	}
	for i := range poison {
		todo = append(todo, pending{id: poison[i].id, accepted: true, poison: &poison[i]})
	}
	last := map[string]string{}
	for {
		var again []pending
		for _, p := range todo {
			s, err := c.getTask(hc, p.id)
			now := time.Now()
			switch {
			case err != nil:
				last[p.id] = "GET failed: " + err.Error()
				again = append(again, p)
			case !s.found && !p.accepted:
				v.byState["never created"]++
			case !s.found:
				last[p.id] = "not found although its schedule was accepted"
				again = append(again, p)
			case p.poison != nil:
				want := map[poisonKind]string{poisonMissingTopic: p.poison.topic, poisonOversized: "large"}[p.poison.kind]
				if s.state == "dead" && strings.Contains(strings.ToLower(s.lastError), strings.ToLower(want)) {
					v.byState["poison dead"]++
					continue
				}
				last[p.id] = fmt.Sprintf("poison (%s) is %s, last error %q; want dead naming %q", p.poison.kind, s.state, s.lastError, want)
				again = append(again, p)
			case endedOrWaiting(s, now):
				v.byState[s.state]++
			default:
				last[p.id] = fmt.Sprintf("%s, due %s, last error %q", s.state, s.dueAt.Format(time.RFC3339Nano), s.lastError)
				again = append(again, p)
			}
		}
		if len(again) == 0 || time.Since(start) > bound {
			for _, p := range again {
				v.stuck = append(v.stuck, fmt.Sprintf("%s: %s", p.id, last[p.id]))
			}
			break
		}
		todo = again
		time.Sleep(500 * time.Millisecond) // poll of a bounded wait
	}
	v.checked = len(tasks)
	v.took = time.Since(start)
	return v
}
