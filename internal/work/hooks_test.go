package work

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// hookCall is one request a hookSink received.
type hookCall struct {
	path, hook, msgID string
	body              []byte
	sigErr            error // worker.VerifyWebhook's verdict
	header            http.Header
}

// hookSink is an outcome hook receiver: it records every request and
// answers what respond says (nil: 200).
type hookSink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []hookCall
	respond func(n int, c hookCall, w http.ResponseWriter, r *http.Request) // n: requests so far to this path and webhook-id, this one included
}

func newHookSink(t *testing.T) *hookSink {
	s := &hookSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c := hookCall{path: r.URL.Path, hook: r.Header.Get("Dq-Hook"), msgID: r.Header.Get(worker.HeaderWebhookID),
			body: body, header: r.Header.Clone(), sigErr: worker.VerifyWebhook(testSecret, r.Header, body, 0)}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		n := 0
		for _, o := range s.calls {
			if o.path == c.path && o.msgID == c.msgID {
				n++
			}
		}
		respond := s.respond
		s.mu.Unlock()
		if respond != nil {
			respond(n, c, w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *hookSink) setRespond(f func(n int, c hookCall, w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	s.respond = f
	s.mu.Unlock()
}

func (s *hookSink) all() []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hookCall(nil), s.calls...)
}

func (s *hookSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// hookEnv is a kfake broker with an outcomes topic of the test's own, and
// a writer into it.
type hookEnv struct {
	kafka *testenv.Kafka
	topic string
	group string
	w     *kafka.Writer
}

func newHookEnv(t *testing.T) *hookEnv {
	t.Helper()
	id := rand.Uint32()
	e := &hookEnv{topic: fmt.Sprintf("outcomes-%d", id), group: fmt.Sprintf("g-%d.hooks", id)}
	e.kafka = testenv.StartKafka(t, e.topic)
	worktest.FastGroups(t, e.kafka)
	e.w = worktest.NewWriter(t, e.kafka.Brokers)
	return e
}

// publish writes outcome records into the topic (as the publisher does).
func (e *hookEnv) publish(t *testing.T, os ...*record.OutcomeRecord) {
	t.Helper()
	msgs := make([]kafka.Message, len(os))
	for i, o := range os {
		msgs[i] = record.EncodeOutcome(o, e.topic)
	}
	if err := e.w.WriteMessages(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
}

func newOutcome(id, typ, outcome string) *record.OutcomeRecord {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &record.OutcomeRecord{ID: id, Type: typ, Outcome: outcome, Attempt: 2, MaxAttempts: 3,
		DueAt: now.Add(-time.Second), FinishedAt: now, Duration: 120 * time.Millisecond, Shard: 1,
		Headers: map[string]string{"tenant": "acme"}}
}

// newTestHooks is a Hooks consumer of e's topic with fast retries.
func (e *hookEnv) newTestHooks(t *testing.T, hooks map[string]OutcomeHooks, reg *prometheus.Registry) *Hooks {
	t.Helper()
	h, err := NewHooks(HooksConfig{
		Hooks: hooks, Brokers: e.kafka.Brokers, Group: e.group, Topic: e.topic,
		SessionTimeout: time.Second, Heartbeat: 100 * time.Millisecond, ShutdownTimeout: 200 * time.Millisecond,
		Secret: []byte(testSecret), Registerer: reg,
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.caller.backoff = retry.Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond}
	h.commitInterval = 50 * time.Millisecond
	h.topicPoll = 100 * time.Millisecond
	return h
}

// runHooks runs h until the returned stop is called (or the test ends).
func runHooks(t *testing.T, h *Hooks) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("hooks: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitCommitted waits until the group committed every record of the
// topic (n records in all): nothing is left to call.
func (e *hookEnv) waitCommitted(t *testing.T, n int64) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("group %s committed %d records", e.group, n), func() bool {
		return sumOffsets(e.committed(t)) >= n
	})
}

// committed is the group's committed offset per partition (none: -1 or
// absent), read with an independent client; a group that does not exist
// yet has none.
func (e *hookEnv) committed(t *testing.T) map[int32]int64 {
	t.Helper()
	return committedOffsets(t, e.kafka, e.group, e.topic)
}

// committedOffsets is group's committed offset per partition of topic
// (none: -1 or absent), read with an independent client; a group that
// does not exist yet has none.
func committedOffsets(t *testing.T, k *testenv.Kafka, group, topic string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{0, 1, 2, 3}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(t.Context(), k.Client(t))
	if err != nil {
		t.Fatalf("offset fetch %s: %v", group, err)
	}
	out := map[int32]int64{}
	if resp.ErrorCode == kerr.GroupIDNotFound.Code {
		return out
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("offset fetch %s: %v", group, err)
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode == 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// metric is the value of the counter (or histogram count) name with
// labels, 0 when absent.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, _ := testenv.MetricValue(reg, name, labels...)
	return v
}

// Each succeeded and dead outcome of a type with hooks calls its hook
// once, signed, with the outcome record as the body; "*" covers types
// without an entry; an entry without URLs silences a type; failed and
// cancelled outcomes and invalid records call nothing. Every offset is
// committed.
func TestHooksCalledOncePerOutcome(t *testing.T) {
	e := newHookEnv(t)
	s := newHookSink(t)
	reg := prometheus.NewRegistry()
	h := e.newTestHooks(t, map[string]OutcomeHooks{
		"order.charge": {OnSuccess: s.srv.URL + "/receipt", OnFailure: s.srv.URL + "/charge-failed", Timeout: 5 * time.Second, MaxAge: time.Hour},
		"*":            {OnFailure: s.srv.URL + "/any-dead", Timeout: 5 * time.Second, MaxAge: time.Hour},
		"health.ping":  {Timeout: 5 * time.Second, MaxAge: time.Hour},
	}, reg)
	runHooks(t, h)

	okCharge := newOutcome("charge-1", "order.charge", record.OutcomeSucceeded)
	deadCharge := newOutcome("charge-2", "order.charge", record.OutcomeDead)
	deadCharge.Error = "card declined"
	deadOther := newOutcome("mail-1", "email.send", record.OutcomeDead)
	e.publish(t,
		okCharge, deadCharge, deadOther,
		newOutcome("charge-3", "order.charge", record.OutcomeFailed),    // attempt failed: no hook
		newOutcome("charge-4", "order.charge", record.OutcomeCancelled), // no hook
		newOutcome("mail-2", "email.send", record.OutcomeSucceeded),     // "*" has no on_success
		newOutcome("ping-1", "health.ping", record.OutcomeDead),         // silenced
	)
	// an invalid record: skipped, counted, committed
	if err := e.w.WriteMessages(t.Context(), kafka.Message{Topic: e.topic, Key: []byte("x"), Value: []byte("not json"),
		Headers: []kafka.Header{{Key: record.HeaderOutcome, Value: []byte("dead")}, {Key: record.HeaderType, Value: []byte("order.charge")}}}); err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(t, 8)

	calls := s.all()
	want := map[string]*record.OutcomeRecord{"/receipt": okCharge, "/charge-failed": deadCharge, "/any-dead": deadOther}
	if len(calls) != len(want) {
		t.Fatalf("%d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for _, c := range calls {
		o := want[c.path]
		if o == nil {
			t.Errorf("unexpected call to %s", c.path)
			continue
		}
		delete(want, c.path)
		if c.sigErr != nil {
			t.Errorf("%s: signature: %v", c.path, c.sigErr)
		}
		if got := string(c.body); got != string(record.EncodeOutcome(o, e.topic).Value) {
			t.Errorf("%s: body %s", c.path, got)
		}
		parsed, err := record.ParseOutcome(&kafka.Message{Value: c.body})
		if err != nil || parsed.ID != o.ID || parsed.Outcome != o.Outcome || parsed.Error != o.Error {
			t.Errorf("%s: body does not parse back to the outcome: %+v %v", c.path, parsed, err)
		}
		wantHook := hookOnFailure
		if o.Outcome == record.OutcomeSucceeded {
			wantHook = hookOnSuccess
		}
		if c.hook != wantHook || c.header.Get("Dq-Id") != o.ID || c.header.Get("Dq-Outcome") != o.Outcome ||
			c.header.Get("Dq-Type") != o.Type || c.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: headers %v", c.path, c.header)
		}
		if c.msgID != hookMessageID(o) {
			t.Errorf("%s: webhook-id %q, want %q", c.path, c.msgID, hookMessageID(o))
		}
	}
	if v := metric(t, reg, "delayq_hook_calls_total", "hook", hookOnSuccess, "result", "ok"); v != 1 {
		t.Errorf("on_success ok = %v, want 1", v)
	}
	if v := metric(t, reg, "delayq_hook_calls_total", "hook", hookOnFailure, "result", "ok"); v != 2 {
		t.Errorf("on_failure ok = %v, want 2", v)
	}
	if v := metric(t, reg, "delayq_hook_records_skipped_total", "reason", "invalid"); v != 1 {
		t.Errorf("skipped invalid = %v, want 1", v)
	}
	if v := metric(t, reg, "delayq_hook_call_duration_seconds", "hook", hookOnFailure); v != 2 {
		t.Errorf("on_failure duration samples = %v, want 2", v)
	}
}

// A 500 is retried (with backoff) until a 2xx; a 400 is given up at once;
// a hook that always fails is given up after hookAttempts requests; a 429
// is retried. Each given-up outcome is committed (not called again).
func TestHooksRetryAndGiveUp(t *testing.T) {
	e := newHookEnv(t)
	s := newHookSink(t)
	s.setRespond(func(n int, c hookCall, w http.ResponseWriter, r *http.Request) {
		switch id := r.Header.Get("Dq-Id"); {
		case id == "flaky" && n <= 2:
			http.Error(w, "restarting", http.StatusInternalServerError)
		case id == "limited" && n == 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		case id == "bad":
			http.Error(w, "no such order", http.StatusBadRequest)
		case id == "down":
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		}
	})
	reg := prometheus.NewRegistry()
	h := e.newTestHooks(t, map[string]OutcomeHooks{
		"*": {OnSuccess: s.srv.URL + "/ok", OnFailure: s.srv.URL + "/dead", Timeout: 5 * time.Second, MaxAge: time.Hour},
	}, reg)
	runHooks(t, h)
	e.publish(t, newOutcome("flaky", "t", record.OutcomeSucceeded), newOutcome("limited", "t", record.OutcomeSucceeded),
		newOutcome("bad", "t", record.OutcomeDead), newOutcome("down", "t", record.OutcomeDead))
	e.waitCommitted(t, 4)

	per := map[string]int{}
	for _, c := range s.all() {
		per[c.header.Get("Dq-Id")]++
		if c.sigErr != nil {
			t.Errorf("signature: %v", c.sigErr)
		}
	}
	if want := map[string]int{"flaky": 3, "limited": 2, "bad": 1, "down": hookAttempts}; fmt.Sprint(per) != fmt.Sprint(want) {
		t.Errorf("requests per outcome %v, want %v", per, want)
	}
	for _, c := range []struct {
		hook, result string
		want         float64
	}{
		{hookOnSuccess, "ok", 2}, {hookOnSuccess, "retry", 3}, {hookOnSuccess, "failed", 0},
		{hookOnFailure, "ok", 0}, {hookOnFailure, "retry", hookAttempts - 1}, {hookOnFailure, "failed", 2},
	} {
		if v := metric(t, reg, "delayq_hook_calls_total", "hook", c.hook, "result", c.result); v != c.want {
			t.Errorf("delayq_hook_calls_total{hook=%q,result=%q} = %v, want %v", c.hook, c.result, v, c.want)
		}
	}
}

// An outcome older than its entry's max_age calls no hook (counted as
// stale); a fresh one does.
func TestHooksSkipStaleOutcomes(t *testing.T) {
	e := newHookEnv(t)
	s := newHookSink(t)
	reg := prometheus.NewRegistry()
	h := e.newTestHooks(t, map[string]OutcomeHooks{
		"t": {OnSuccess: s.srv.URL + "/ok", Timeout: 5 * time.Second, MaxAge: time.Minute},
	}, reg)
	runHooks(t, h)
	old := newOutcome("old", "t", record.OutcomeSucceeded)
	old.FinishedAt = old.FinishedAt.Add(-2 * time.Minute)
	e.publish(t, old, newOutcome("fresh", "t", record.OutcomeSucceeded))
	e.waitCommitted(t, 2)
	calls := s.all()
	if len(calls) != 1 || calls[0].header.Get("Dq-Id") != "fresh" {
		t.Errorf("calls %+v, want one for fresh", calls)
	}
	if v := metric(t, reg, "delayq_hook_records_skipped_total", "reason", "stale"); v != 1 {
		t.Errorf("skipped stale = %v, want 1", v)
	}
}

// A hook call that had not finished when its consumer stopped (here: the
// receiver never answers, the shutdown deadline cancels it) is not
// committed: the next consumer of the group calls it again (at least
// once), and a record behind it in the same partition too.
func TestHooksCalledAgainAfterRestart(t *testing.T) {
	e := newHookEnv(t)
	s := newHookSink(t)
	first := make(chan struct{}, 1)
	slow := newOutcome("slow", "t", record.OutcomeSucceeded)
	next := newOutcome("slow", "t", record.OutcomeSucceeded) // same key: same partition, behind it
	next.Attempt = 3
	s.setRespond(func(n int, c hookCall, w http.ResponseWriter, r *http.Request) {
		if n == 1 && c.msgID == hookMessageID(slow) {
			first <- struct{}{}
			<-r.Context().Done() // until the caller gives up on the request
		}
	})
	hooks := map[string]OutcomeHooks{"t": {OnSuccess: s.srv.URL + "/ok", Timeout: time.Minute, MaxAge: time.Hour}}
	h1 := e.newTestHooks(t, hooks, prometheus.NewRegistry())
	stop1 := runHooks(t, h1)
	e.publish(t, slow, next)
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("hook not called")
	}
	stop1() // cancels the request in flight after ShutdownTimeout
	if c := e.committed(t); sumOffsets(c) != 0 {
		t.Fatalf("committed %v before the hook call finished", c)
	}

	h2 := e.newTestHooks(t, hooks, prometheus.NewRegistry())
	runHooks(t, h2)
	e.waitCommitted(t, 2)
	var ids []string
	for _, c := range s.all() {
		ids = append(ids, c.msgID)
		if c.sigErr != nil {
			t.Errorf("signature: %v", c.sigErr)
		}
	}
	want := []string{hookMessageID(slow), hookMessageID(slow), hookMessageID(next)}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("calls %v, want %v", ids, want)
	}
}

func sumOffsets(m map[int32]int64) int64 {
	var n int64
	for _, o := range m {
		n += max(o, 0)
	}
	return n
}

// Hook entries in the work config file: parsed with defaults, "*"
// applies to types without an entry; errors name the type and the field.
func TestHooksWorkConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "work.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(file string) map[string]string {
		return map[string]string{"DQ_WEBHOOK_URL": "http://sink/x", "DQ_WORK_CONFIG": write(file)}
	}
	c, err := parse(t, nil, env(`{"hooks": {
		"order.charge": {"on_success": "https://shop/receipt", "on_failure": "http://shop:8080/failed", "timeout": "3s", "max_age": "24h"},
		"*": {"on_failure": "https://ops/dead"},
		"health.ping": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Hooks["order.charge"]; got != (OutcomeHooks{OnSuccess: "https://shop/receipt", OnFailure: "http://shop:8080/failed", Timeout: 3 * time.Second, MaxAge: 24 * time.Hour}) {
		t.Errorf("order.charge: %+v", got)
	}
	if got := c.Hooks["*"]; got != (OutcomeHooks{OnFailure: "https://ops/dead", Timeout: DefaultHookTimeout, MaxAge: DefaultHookMaxAge}) {
		t.Errorf("*: %+v", got)
	}
	for _, tc := range []struct{ typ, outcome, want string }{
		{"order.charge", record.OutcomeSucceeded, "https://shop/receipt"},
		{"order.charge", record.OutcomeDead, "http://shop:8080/failed"},
		{"email.send", record.OutcomeDead, "https://ops/dead"},
		{"email.send", record.OutcomeSucceeded, ""},
		{"health.ping", record.OutcomeDead, ""}, // its own entry replaces "*" as a whole
		{"order.charge", record.OutcomeFailed, ""},
		{"order.charge", record.OutcomeCancelled, ""},
	} {
		e := hooksFor(c.Hooks, tc.typ)
		if got, _ := e.URL(tc.outcome); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.typ, tc.outcome, got, tc.want)
		}
	}
	if !anyHook(c.Hooks) || anyHook(map[string]OutcomeHooks{"a": {}}) {
		t.Error("anyHook")
	}

	for _, bad := range []struct{ file, want string }{
		{`{"hooks": {"a": {"on_succes": "http://x"}}}`, `hooks: type "a": json: unknown field "on_succes"`},
		{`{"hooks": {"a": {"on_failure": "ftp://x"}}}`, `hooks: type "a": on_failure: webhook url "ftp://x"`},
		{`{"hooks": {"a": {"on_success": "not a url"}}}`, `hooks: type "a": on_success`},
		{`{"hooks": {"a": {"on_success": ""}}}`, `hooks: type "a": on_success: empty URL`},
		{`{"hooks": {"a": {"on_success": "http://x", "timeout": "5"}}}`, `hooks: type "a": timeout "5"`},
		{`{"hooks": {"a": {"on_success": "http://x", "timeout": "-1s"}}}`, `hooks: type "a": timeout "-1s"`},
		{`{"hooks": {"a": {"on_success": "http://x", "max_age": "0s"}}}`, `hooks: type "a": max_age "0s"`},
		{`{"hooks": {"": {"on_success": "http://x"}}}`, `hooks: an entry with an empty task type`},
		{`{"hooks": []}`, `hooks: json: cannot unmarshal array`},
		{`{"hooks": {"a": "http://x"}}`, `hooks: type "a"`},
	} {
		_, err := parse(t, nil, env(bad.file))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.file, err, bad.want)
		}
	}
	// hooks without outcomes: nothing would ever call them
	off := env(`{"hooks": {"a": {"on_success": "http://x"}}}`)
	off["DQ_OUTCOMES_TOPIC"] = "none"
	if _, err := parse(t, nil, off); err == nil || !strings.Contains(err.Error(), "hooks need the outcomes topic") {
		t.Errorf("hooks with DQ_OUTCOMES_TOPIC=none: %v", err)
	}
}

// testLogger writes warnings and errors to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
