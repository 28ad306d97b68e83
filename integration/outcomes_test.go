package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

// TestLocalOutcomes runs the outcomes scenario against the real binaries.
func TestLocalOutcomes(t *testing.T) {
	t.Parallel()
	scenarioOutcomes(t, localProvisioner{})
}

// scenarioOutcomes is the "done when" for outcome events, end to
// end through the binaries (a daemon with DQ_KAFKA_BROKERS, an event
// process, two work processes, DQ_OUTCOMES_ATTEMPTS=true): succeeding,
// retrying-then-succeeding, permanently failing (400) and exhausted tasks,
// a task the daemon cancels and a task Kafka refuses at fire time (its
// topic is missing past the poison grace) each leave exactly one terminal
// record on dq.outcomes with the right outcome and publisher, and every
// failed attempt that was retried a "failed" record.
func scenarioOutcomes(t *testing.T, p Provisioner) {
	rec := newRecorder(func(d delivery) (int, time.Duration) {
		switch {
		case strings.HasPrefix(d.ID, "flaky-") && d.Attempt <= 2:
			return http.StatusInternalServerError, 0
		case strings.HasPrefix(d.ID, "bad-"):
			return http.StatusBadRequest, 0
		case strings.HasPrefix(d.ID, "down-"):
			return http.StatusServiceUnavailable, 0
		}
		return http.StatusOK, 0
	})
	c := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 2, Webhook: rec, Env: map[string]string{
		"DQ_OUTCOMES_ATTEMPTS": "true",
		"DQ_FIRE_POISON_GRACE": "1s",
		"DQ_BACKOFF_MIN":       "100ms",
		"DQ_BACKOFF_MAX":       "1s",
	}})
	kl := watchKafka(t, c, record.DefaultOutcomesTopic)
	api := newAPI(c, 0)

	type want struct {
		outcome string
		attempt int // of the terminal record
		failed  int // "failed" records
	}
	wants := map[string]want{}
	var tasks []client.Task
	soon := time.Now().Add(500 * time.Millisecond)
	for i := range 5 {
		for _, k := range []struct {
			prefix string
			max    int
			w      want
		}{
			{"ok-", 5, want{record.OutcomeSucceeded, 1, 0}},
			{"flaky-", 5, want{record.OutcomeSucceeded, 3, 2}},
			{"bad-", 5, want{record.OutcomeDead, 1, 0}},
			{"down-", 2, want{record.OutcomeDead, 2, 1}},
		} {
			id := fmt.Sprintf("%s%d", k.prefix, i)
			tasks = append(tasks, client.Task{ID: id, Type: "it.outcome", Payload: json.RawMessage(`{}`), DueAt: soon,
				MaxAttempts: k.max, Headers: map[string]string{"tenant": id}})
			wants[id] = k.w
		}
	}
	tasks = append(tasks,
		client.Task{ID: "cancel-1", Type: "it.outcome", Payload: json.RawMessage(`{}`), Delay: time.Hour, Headers: map[string]string{"tenant": "cancel-1"}},
		client.Task{ID: "poison-1", Type: "it.outcome", Payload: json.RawMessage(`{}`), DueAt: soon, Topic: uniqueName("it.missing."),
			Headers: map[string]string{"tenant": "poison-1"}})
	wants["cancel-1"] = want{record.OutcomeCancelled, 1, 0}
	wants["poison-1"] = want{record.OutcomeDead, 1, 0}
	scheduleBatch(t, api, tasks)
	if err := api.Cancel(t.Context(), "cancel-1"); err != nil {
		t.Fatalf("cancel: %v", err)
	}

	ids := keys(wants)
	expect := 0
	for _, w := range wants {
		expect += 1 + w.failed
	}
	waitFor(t, 60*time.Second, "every task's terminal outcome record", func() (bool, string) {
		n, missing := 0, []string{}
		for _, id := range ids {
			rs := kl.records(id)
			n += len(rs)
			if len(rs) < 1+wants[id].failed {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0 && n >= expect, fmt.Sprintf("%d of %d records; short: %v", n, expect, missing)
	})
	// Everything published is counted: the sum over the processes says
	// no record was published twice.
	waitFor(t, 10*time.Second, "the publish metrics", func() (bool, string) {
		total := 0.0
		for _, r := range Roles {
			for i := range map[Role]int{Daemon: 1, Event: 1, Work: 2}[r] {
				for _, o := range []string{"succeeded", "failed", "dead", "cancelled"} {
					v, _ := metric(hc, c.AdminURL(r, i), `delayq_outcomes_published_total{outcome="`+o+`"}`)
					total += v
				}
			}
		}
		return total == float64(expect), fmt.Sprintf("published %v, want %d", total, expect)
	})

	for _, id := range ids {
		w := wants[id]
		var terminal []*record.OutcomeRecord
		var failed []int
		for _, r := range kl.records(id) {
			o := testenv.ParseOutcome(t, r)
			if o.Type != "it.outcome" || o.Headers["tenant"] != id || o.FinishedAt.IsZero() {
				t.Errorf("%s: record %s", id, r.Value)
			}
			if o.Outcome == record.OutcomeFailed {
				failed = append(failed, o.Attempt)
				continue
			}
			terminal = append(terminal, o)
		}
		sort.Ints(failed)
		if len(terminal) != 1 || len(failed) != w.failed {
			t.Errorf("%s: %d terminal records, failed attempts %v; want 1 terminal and %d failed", id, len(terminal), failed, w.failed)
			continue
		}
		if o := terminal[0]; o.Outcome != w.outcome || o.Attempt != w.attempt {
			t.Errorf("%s: %s at attempt %d, want %s at attempt %d (error %q)", id, o.Outcome, o.Attempt, w.outcome, w.attempt, o.Error)
		}
	}
	if o := kl.records("poison-1"); len(o) == 1 && !strings.Contains(testenv.ParseOutcome(t, o[0]).Error, "it.missing.") {
		t.Errorf("poison-1: error %q does not name its topic", testenv.ParseOutcome(t, o[0]).Error)
	}
	if o := kl.records("bad-0"); len(o) == 1 && !strings.Contains(testenv.ParseOutcome(t, o[0]).Error, "400") {
		t.Errorf("bad-0: error %q", testenv.ParseOutcome(t, o[0]).Error)
	}
}
