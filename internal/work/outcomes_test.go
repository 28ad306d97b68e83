package work

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// metricSum sums the samples of the work app's /metrics whose line
// starts with prefix (a metric name with, optionally, the start of its
// labels).
func metricSum(t *testing.T, app *App, prefix string) float64 {
	t.Helper()
	sum := 0.0
	for _, line := range strings.Split(scrape(t, app), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// The "done when" for outcomes, through the work app: succeeding,
// retrying-then-succeeding and permanently failing tasks (a 400, and
// attempts exhausted) leave exactly one terminal outcome record per task
// with the right outcome, error, attempt and headers; with
// DQ_OUTCOMES_ATTEMPTS each failed attempt that is retried has a "failed"
// record too.
func TestWorkOutcomesTopic(t *testing.T) {
	for _, attempts := range []bool{false, true} {
		t.Run(fmt.Sprintf("attempts=%v", attempts), func(t *testing.T) {
			const topic = "dq.outcomes"
			e := &env{worktest.NewEnv(t, shards, task.DefaultTopic, "dq.dead", topic)}
			col := e.Kafka.Collect(t, topic)
			s := newSink(t)
			s.setRespond(func(c call, w http.ResponseWriter, r *http.Request) {
				switch {
				case strings.HasPrefix(c.id, "flaky-") && c.attempt <= 2:
					http.Error(w, "database is restarting", http.StatusInternalServerError)
				case strings.HasPrefix(c.id, "bad-"):
					http.Error(w, "order not found", http.StatusBadRequest)
				case strings.HasPrefix(c.id, "down-"):
					http.Error(w, "maintenance", http.StatusServiceUnavailable)
				}
			})
			vars := e.vars(s.srv.URL)
			if attempts {
				vars["DQ_OUTCOMES_ATTEMPTS"] = "true"
			}
			app := startApp(t, vars)
			e.Firer.Start(t)

			var tasks []*task.Task
			want := map[string]string{} // id -> terminal outcome
			failed := map[string]int{}  // id -> failed attempts retried
			attempt := map[string]int{} // id -> the terminal attempt
			for i := range 10 {
				for _, k := range []struct {
					prefix, outcome string
					failed, attempt int
				}{
					{"ok-", record.OutcomeSucceeded, 0, 1},
					{"flaky-", record.OutcomeSucceeded, 2, 3},
					{"bad-", record.OutcomeDead, 0, 1},
					{"down-", record.OutcomeDead, 1, 2},
				} {
					id := k.prefix + itoa(i)
					tk := jsonTask(id, "order.cancel")
					tk.MaxAttempts = 5
					if k.prefix == "down-" {
						tk.MaxAttempts = 2
					}
					tk.Headers = map[string]string{"tenant": "acme-" + itoa(i)}
					tasks = append(tasks, tk)
					want[id], failed[id], attempt[id] = k.outcome, k.failed, k.attempt
				}
			}
			worktest.Schedule(t, e.Store, tasks...)
			var ok, dead []string
			expect := 0
			for id, o := range want {
				if o == record.OutcomeSucceeded {
					ok = append(ok, id)
				} else {
					dead = append(dead, id)
				}
				expect++
				if attempts {
					expect += failed[id]
				}
			}
			e.WaitState(t, 30*time.Second, task.StateSucceeded, ok...)
			e.WaitState(t, 30*time.Second, task.StateDead, dead...)
			testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%d outcome records", expect), func() bool {
				return col.Total() >= expect
			})
			// every publish is counted: equal counts mean no record twice
			testenv.WaitFor(t, 5*time.Second, "the publish metric", func() bool {
				return metricSum(t, app, "delayq_outcomes_published_total") == float64(expect)
			})
			if n := col.Total(); n != expect {
				t.Fatalf("%d outcome records, want %d", n, expect)
			}
			if d := metricSum(t, app, "delayq_outcomes_dropped_total"); d != 0 {
				t.Errorf("dropped %v", d)
			}
			terminal := map[string][]*record.OutcomeRecord{}
			fails := map[string][]int{}
			for _, r := range col.All() {
				o := testenv.ParseOutcome(t, r)
				if id, _ := testenv.Header(r, record.HeaderID); id != o.ID || string(r.Key) != o.ID {
					t.Errorf("record of %s: dq-id %q key %q", o.ID, id, r.Key)
				}
				if o.Type != "order.cancel" || o.Headers["tenant"] == "" || o.MaxAttempts == 0 ||
					o.FinishedAt.IsZero() || o.DueAt.IsZero() || o.DueAt.After(o.FinishedAt) || o.Shard < 0 || o.Shard >= shards {
					t.Errorf("record %s", r.Value)
				}
				if o.Outcome == record.OutcomeFailed {
					fails[o.ID] = append(fails[o.ID], o.Attempt)
					if !strings.Contains(o.Error, "500") && !strings.Contains(o.Error, "503") {
						t.Errorf("failed record %s: error %q", o.ID, o.Error)
					}
					continue
				}
				terminal[o.ID] = append(terminal[o.ID], o)
			}
			for id, w := range want {
				ts := terminal[id]
				if len(ts) != 1 {
					t.Errorf("%s: %d terminal records, want 1", id, len(ts))
					continue
				}
				o := ts[0]
				if o.Outcome != w || o.Attempt != attempt[id] || o.Headers["tenant"] != "acme-"+id[strings.IndexByte(id, '-')+1:] {
					t.Errorf("%s: outcome %s attempt %d headers %v, want %s attempt %d", id, o.Outcome, o.Attempt, o.Headers, w, attempt[id])
				}
				switch {
				case strings.HasPrefix(id, "bad-") && !strings.Contains(o.Error, "order not found"),
					strings.HasPrefix(id, "down-") && !strings.Contains(o.Error, "maintenance"),
					w == record.OutcomeSucceeded && o.Error != "":
					t.Errorf("%s: error %q", id, o.Error)
				}
				wantFails := 0
				if attempts {
					wantFails = failed[id]
				}
				got := fails[id]
				sort.Ints(got)
				if len(got) != wantFails {
					t.Errorf("%s: failed records for attempts %v, want %d", id, got, wantFails)
				}
				for i, a := range got {
					if a != i+1 {
						t.Errorf("%s: failed records for attempts %v", id, got)
					}
				}
			}
		})
	}
}

// DQ_OUTCOMES_TOPIC defaults to dq.outcomes (none disables), DQ_OUTCOMES_ATTEMPTS
// to false; a topic Kafka would refuse is a config error naming the setting.
func TestConfigOutcomes(t *testing.T) {
	env := map[string]string{"DQ_WEBHOOK_URL": "http://sink/x"}
	c, err := parse(t, nil, env)
	if err != nil || c.OutcomesTopic != record.DefaultOutcomesTopic || c.OutcomesAttempts {
		t.Fatalf("defaults: %q %v, %v", c.OutcomesTopic, c.OutcomesAttempts, err)
	}
	env["DQ_OUTCOMES_TOPIC"], env["DQ_OUTCOMES_ATTEMPTS"] = "none", "true"
	if c, err = parse(t, nil, env); err != nil || outcome.Enabled(c.OutcomesTopic) || !c.OutcomesAttempts {
		t.Fatalf("from env: %q %v, %v", c.OutcomesTopic, c.OutcomesAttempts, err)
	}
	if c, err = parse(t, []string{"-outcomes-topic", ""}, env); err != nil || c.OutcomesTopic != "" {
		t.Fatalf("from a flag: %q, %v", c.OutcomesTopic, err)
	}
	env["DQ_OUTCOMES_TOPIC"] = "bad topic"
	if _, err = parse(t, nil, env); err == nil || !strings.Contains(err.Error(), "outcomes-topic") {
		t.Fatalf("bad topic: %v", err)
	}
}

// A worker outcome becomes the record the contract describes; failed
// attempts are published only with DQ_OUTCOMES_ATTEMPTS.
func TestOutcomeRecordOfWorkerOutcome(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	o := worker.Outcome{Kind: worker.OutcomeDead, Err: errors.New("boom"), Shard: 3, Finished: now, Duration: 7 * time.Millisecond,
		Task: &worker.Task{ID: "a", Type: "t", Attempt: 2, MaxAttempts: 2, DueAt: now.Add(-time.Second), Headers: map[string]string{"k": "v"}}}
	got := outcomeRecord(o)
	want := record.OutcomeRecord{ID: "a", Type: "t", Outcome: record.OutcomeDead, Attempt: 2, MaxAttempts: 2, Error: "boom",
		DueAt: now.Add(-time.Second), FinishedAt: now, Duration: 7 * time.Millisecond, Shard: 3, Headers: map[string]string{"k": "v"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// the task's trace context goes with its outcome records' headers
	o.Task.Headers = map[string]string{"k": "v", "traceparent": testTP, "tracestate": testTS}
	r := outcomeRecord(o)
	m := record.EncodeOutcome(&r, "x")
	for k, v := range map[string]string{"traceparent": testTP, "tracestate": testTS} {
		if got := headerValue(&m, k); got != v {
			t.Errorf("outcome record header %s = %q, want %q", k, got, v)
		}
	}
	if onOutcome(nil, true) != nil {
		t.Error("a hook without a publisher")
	}
	for _, attempts := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		// a publisher whose broker is never reached within the test: what
		// it took is counted at Close as shutdown drops
		pub, err := outcome.New(t.Context(), outcome.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "x", Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		hook := onOutcome(pub, attempts)
		hook(worker.Outcome{Kind: worker.OutcomeFailed, Err: errors.New("x"), Task: &worker.Task{ID: "a", Type: "t", Attempt: 1}})
		hook(worker.Outcome{Kind: worker.OutcomeSucceeded, Task: &worker.Task{ID: "a", Type: "t", Attempt: 2}})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		_ = pub.Close(ctx)
		cancel()
		sum := 0.0
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
		if want := map[bool]float64{false: 1, true: 2}[attempts]; sum != want {
			t.Errorf("attempts=%v: %v records published or dropped, want %v", attempts, sum, want)
		}
	}
}
