package worker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// Records that are not usable delayq records go to the dead topic with a
// reason and are committed; the worker keeps running tasks.
func TestHostileRecordsAreDeadLettered(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	cfg, reg := e.config(t, "w1")
	cfg.MaxPayload = 64 << 10
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { led.record("w1", tk); return nil })
	})
	h := func(kv ...string) []kafka.Header {
		var hs []kafka.Header
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	valid := func(id string) []string {
		return []string{"dq-id", id, "dq-type", "x", "dq-gen", "1", "dq-attempt", "1", "dq-due-at", "1700000000000"}
	}
	hostile := []struct {
		name string
		msg  kafka.Message
		why  string
	}{
		{"no headers", kafka.Message{Value: []byte("hello")}, "no headers"},
		{"foreign headers only", kafka.Message{Value: []byte("x"), Headers: h("traceparent", "00-abc")}, "no dq-id header"},
		{"bad id", kafka.Message{Headers: h("dq-id", "two words", "dq-type", "x")}, "bad dq-id header"},
		{"garbage gen", kafka.Message{Headers: h("dq-id", "a", "dq-type", "x", "dq-gen", "\xff\xfe", "dq-attempt", "1", "dq-due-at", "1")}, "bad dq-gen header"},
		{"attempt zero", kafka.Message{Headers: h("dq-id", "a", "dq-type", "x", "dq-gen", "1", "dq-attempt", "0", "dq-due-at", "1")}, "dq-attempt header 0 out of range"},
		{"duplicate id", kafka.Message{Headers: h(append(valid("a"), "dq-id", "b")...)}, "given twice"},
		{"huge payload", kafka.Message{Value: make([]byte, 100<<10), Headers: h(valid("big")...)}, "payload of 102400 bytes is over the limit of 65536"},
		{"unknown id", kafka.Message{Value: []byte("{}"), Headers: h(valid("nobody-knows-me")...)}, `unknown task id "nobody-knows-me"`},
	}
	var msgs []kafka.Message
	for _, c := range hostile {
		m := c.msg
		m.Topic, m.Key = task.DefaultTopic, []byte(c.name)
		msgs = append(msgs, m)
	}
	if err := e.Firer.Writer.WriteMessages(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	recs := worktest.ReadTopic(t, e.Kafka, "dq.dead", len(hostile), 15*time.Second)
	got := map[string]string{}
	for _, rec := range recs {
		why, _ := testenv.Header(rec, "dq-error")
		got[string(rec.Key)] = why
		if string(rec.Key) == "huge payload" {
			n, _ := testenv.Header(rec, "dq-payload-bytes")
			if len(rec.Value) != 0 || n != "102400" {
				t.Errorf("huge payload dead letter: value %d bytes, dq-payload-bytes %q", len(rec.Value), n)
			}
		}
		if src, _ := testenv.Header(rec, "dq-source-topic"); src != task.DefaultTopic {
			t.Errorf("%s: dq-source-topic %q", rec.Key, src)
		}
	}
	for _, c := range hostile {
		if !strings.Contains(got[c.name], c.why) {
			t.Errorf("%s: dq-error %q, want it to contain %q", c.name, got[c.name], c.why)
		}
	}
	// still running: a real task after the hostile ones succeeds
	worktest.Fire(t, e.Firer, newTask("after-hostile", "x"))
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "after-hostile")
	if n := r.handled(t, "hostile"); n != float64(len(hostile)) {
		t.Errorf("hostile metric %v", n)
	}
	if led.distinct() != 1 {
		t.Errorf("handler ran for %d ids", led.distinct())
	}
	// and every hostile record was committed
	testenv.WaitFor(t, 5*time.Second, "all offsets committed", func() bool {
		total := int64(0)
		for _, off := range worktest.Committed(t, e.Kafka, e.Group, task.DefaultTopic) {
			total += max(off, 0)
		}
		return total == int64(len(hostile)+1)
	})
}

// A copy of a record whose outcome is stored, a copy of an older
// generation, a copy of a cancelled task, and a record replayed after its
// task's record expired are skipped.
func TestStaleAndFinishedCopiesAreSkipped(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	cfg, reg := e.config(t, "w1")
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { led.record("w1", tk); return nil })
	})
	a := newTask("a", "x")
	worktest.Fire(t, e.Firer, a)
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "a")
	fired, err := e.Store.Get(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	dup := worktest.Message(fired, time.Now())
	old := *fired
	old.Gen--
	stale := worktest.Message(&old, time.Now())

	c := newTask("c", "x")
	c.DueAt = time.Now().Add(time.Hour)
	worktest.Schedule(t, e.Store, c)
	if err := e.Store.Cancel(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	cc, _ := e.Store.Get(t.Context(), "c")
	cancelled := worktest.Message(cc, time.Now())
	// a record replayed long after its task finished and the record
	// expired (retention 24h): skipped, not dead-lettered
	gone := &task.Task{ID: "long-gone", Type: "x", Attempt: 1, Gen: 1, DueAt: time.Now().Add(-49 * time.Hour)}
	expired := worktest.Message(gone, time.Now().Add(-48*time.Hour))
	if err := e.Firer.Writer.WriteMessages(t.Context(), dup, stale, cancelled, expired); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "copies skipped", func() bool {
		return r.handled(t, "skipped_done") == 3 && r.handled(t, "skipped_stale") == 1
	})
	if n := r.handled(t, "hostile"); n != 0 {
		t.Errorf("%v records dead-lettered", n)
	}
	if led.count("a") != 1 || led.count("c") != 0 {
		t.Errorf("runs: a %d, c %d", led.count("a"), led.count("c"))
	}
}

// A third worker joins a group of two mid-stream and later leaves: every
// task runs exactly once.
func TestRebalanceJoinAndLeave(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	handler := func(name string) func(w *worker.Worker) {
		return func(w *worker.Worker) {
			w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
				led.record(name, tk)
				select { // keep records in flight across rebalances
				case <-time.After(time.Duration(5+len(tk.ID)%4*5) * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			})
		}
	}
	var ws []*running
	for _, name := range []string{"w1", "w2"} {
		cfg, reg := e.config(t, name)
		ws = append(ws, start(t, cfg, reg, handler(name)))
	}
	ctx, cancel := context.WithCancel(t.Context())
	var fg sync.WaitGroup
	fg.Go(func() { _ = e.Firer.Run(ctx) })
	defer func() { cancel(); fg.Wait() }()

	const n = 900
	var ids []string
	var w3 *running
	for i := range n {
		id := "task-" + string(rune('a'+i%26)) + "-" + itoa(i)
		ids = append(ids, id)
		worktest.Schedule(t, e.Store, newTask(id, "x"))
		time.Sleep(3 * time.Millisecond)
		switch i {
		case n / 3:
			cfg, reg := e.config(t, "w3")
			w3 = start(t, cfg, reg, handler("w3"))
			t.Logf("w3 joined after %d tasks", i+1)
		case 2 * n / 3:
			w3.stop()
			t.Logf("w3 left after %d tasks", i+1)
		}
	}
	e.WaitState(t, 60*time.Second, task.StateSucceeded, ids...)
	testenv.WaitFor(t, 5*time.Second, "all runs recorded", func() bool { return led.distinct() == n })
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
	if led.byWork["w3"] == 0 {
		t.Errorf("w3 ran nothing: %v", led.byWork)
	}
	ws = append(ws, w3)
	var skipped, waits float64
	for _, r := range ws {
		skipped += r.handled(t, "skipped_done") + r.handled(t, "skipped_stale")
		waits += metricSum(t, r.reg, "delayq_work_claim_waits_total", nil)
	}
	t.Logf("runs per worker %v; redelivered copies skipped %v, claim waits %v", led.byWork, skipped, waits)
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// At the shutdown deadline running handlers are cancelled and their records
// stay uncommitted: the next worker runs them. Records finished before are
// not run again.
func TestShutdownAbandonsAtDeadline(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	blocked := make(chan struct{}, 1)
	cfg, reg := e.config(t, "w1")
	cfg.ShutdownTimeout = 300 * time.Millisecond
	w1 := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			if tk.ID == "block" {
				blocked <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
	})
	var ids []string
	for i := range 20 {
		ids = append(ids, "done-"+itoa(i))
	}
	tasks := []*task.Task{newTask("block", "x")}
	for _, id := range ids {
		tasks = append(tasks, newTask(id, "x"))
	}
	worktest.Fire(t, e.Firer, tasks...)
	<-blocked
	e.WaitState(t, 10*time.Second, task.StateSucceeded, ids...)
	begin := time.Now()
	w1.stop()
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("shutdown took %v with a 300ms timeout", d)
	}
	if tk, _ := e.Store.Get(t.Context(), "block"); tk.State != task.StateFired {
		t.Fatalf("abandoned task is %s", tk.State)
	}
	cfg2, reg2 := e.config(t, "w2")
	start(t, cfg2, reg2, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { led.record("w2", tk); return nil })
	})
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "block")
	if n := led.count("block"); n != 2 {
		t.Errorf("block ran %d times, want 2 (abandoned, then again)", n)
	}
	if tw := led.twice(); len(tw) != 1 {
		t.Errorf("ran more than once: %v", tw)
	}
}

// While Redis is down the outcome cannot be stored: the worker retries,
// does not commit the record, and stores the outcome once Redis is back.
func TestRedisOutageDelaysOutcomeNotCommit(t *testing.T) {
	e := newEnv(t)
	aof := testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
	e.Redis, e.RDB = aof, aof.Client(t)
	var err error
	if e.Store, err = newStore(t, e); err != nil {
		t.Fatal(err)
	}
	e.Firer.Store = e.Store
	led := newLedger()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	cfg, reg := e.config(t, "w1")
	w1 := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			started <- struct{}{}
			<-release
			return nil
		})
	})
	worktest.Fire(t, e.Firer, newTask("hold", "x"))
	<-started
	e.Redis.Stop(t)
	close(release)
	testenv.WaitFor(t, 5*time.Second, "not ready while Redis is down", func() bool {
		return w1.w.Ready(t.Context()) != nil
	})
	time.Sleep(300 * time.Millisecond) // several commit intervals pass: nothing may be committed
	for p, off := range worktest.Committed(t, e.Kafka, e.Group, task.DefaultTopic) {
		if off > 0 {
			t.Fatalf("partition %d committed to %d before the outcome was stored", p, off)
		}
	}
	e.Redis.Restart(t)
	e.WaitState(t, 15*time.Second, task.StateSucceeded, "hold")
	testenv.WaitFor(t, 5*time.Second, "committed after the outcome", func() bool {
		total := int64(0)
		for _, off := range worktest.Committed(t, e.Kafka, e.Group, task.DefaultTopic) {
			total += max(off, 0)
		}
		return total == 1
	})
	if n := led.count("hold"); n != 1 {
		t.Errorf("hold ran %d times", n)
	}
}

// Every record is in the topic twice, back to back, and both copies are
// handled at the same time by one worker: the execution claim and the read
// that follows it let exactly one copy run.
func TestConcurrentCopiesRunOnce(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	cfg, reg := e.config(t, "w1")
	cfg.Concurrency = 32
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			time.Sleep(time.Millisecond) // overlap the copies
			return nil
		})
	})
	const n = 300
	var tasks []*task.Task
	var ids []string
	for i := range n {
		tasks = append(tasks, newTask("dup-"+itoa(i), "x"))
		ids = append(ids, "dup-"+itoa(i))
	}
	worktest.Schedule(t, e.Store, tasks...)
	// fire by hand so each record can be written twice
	var msgs []kafka.Message
	for sh := range shards {
		tk, err := e.Store.Take(t.Context(), sh, 1, 1000, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, ft := range tk.Tasks {
			m := worktest.Message(ft, tk.Now)
			msgs = append(msgs, m, m)
		}
	}
	if len(msgs) != 2*n {
		t.Fatalf("took %d records", len(msgs)/2)
	}
	if err := e.Firer.Writer.WriteMessages(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	e.WaitState(t, 20*time.Second, task.StateSucceeded, ids...)
	testenv.WaitFor(t, 10*time.Second, "every copy processed", func() bool {
		return r.handled(t, "succeeded")+r.handled(t, "skipped_done") == 2*n
	})
	if tw := led.twice(); len(tw) > 0 {
		t.Fatalf("ran more than once: %v", tw)
	}
	t.Logf("%v copies waited on a claim held by the other copy", metricSum(t, r.reg, "delayq_work_claim_waits_total", nil))
}

// A record that waits for a handler slot longer than its claim lasts must
// not run once another worker took the expired claim and finished the
// task meanwhile (a rebalance handed the record to both): before running,
// a record that waited for a good part of its claim is claimed again.
func TestClaimExpiredWhileQueuedIsCheckedAgain(t *testing.T) {
	e := newEnv(t)
	led := newLedger()
	cfg, reg := e.config(t, "w1")
	cfg.Concurrency = 1
	cfg.DefaultTimeout = 300 * time.Millisecond
	cfg.ClaimMargin = 100 * time.Millisecond // claims last 400ms
	first := make(chan string, 1)
	release := make(chan struct{})
	r := start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			if led.record("w1", tk) == 1 && led.distinct() == 1 {
				first <- tk.ID
				<-release // holds the only slot past every claim's TTL
			}
			return nil
		})
	})
	tasks := []*task.Task{newTask("q-a", "x"), newTask("q-b", "x")}
	worktest.Fire(t, e.Firer, tasks...)
	var running string
	select {
	case running = <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("no handler started")
	}
	other := "q-a"
	if running == "q-a" {
		other = "q-b"
	}
	got, err := e.Store.Get(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "w1 claimed the queued record", func() bool {
		return strings.HasPrefix(claimHolder(t, e, other, got.Gen), "w1:")
	})
	// the queued record's claim expires; another worker claims and
	// finishes the task
	var res []redisstore.ClaimResult
	testenv.WaitFor(t, 5*time.Second, "the queued record's claim expired", func() bool {
		res, err = e.Store.ClaimMany(t.Context(), []redisstore.Claim{{ID: other, Gen: got.Gen, TTL: time.Minute, Owner: "w2:1"}})
		return err == nil && res[0].Code == redisstore.Claimed
	})
	if _, err := e.Store.FinishMany(t.Context(), []redisstore.Finish{{ID: other, Gen: got.Gen, Kind: redisstore.Succeeded, Owner: "w2:1"}}); err != nil {
		t.Fatal(err)
	}
	close(release)
	testenv.WaitFor(t, 10*time.Second, "both records processed", func() bool {
		return r.handled(t, "succeeded")+r.handled(t, "skipped_done") == 2
	})
	if n := led.count(other); n != 0 {
		t.Fatalf("%s ran %d times in w1 after w2 had finished it", other, n)
	}
}

// claimHolder is the owner of the unexpired execution claim of generation
// gen of task id, "" when none: field "<id>:<gen>" of the shard's claims
// hash dq:{<ns>:<shard>}:runs, "<deadline ms>|<owner>" (see the package
// documentation), read with Redis' clock.
func claimHolder(t *testing.T, e *env, id string, gen uint64) string {
	t.Helper()
	key := fmt.Sprintf("dq:{%s:%d}:runs", e.NS, e.Store.Shard(id))
	v, err := e.RDB.HGet(t.Context(), key, id+":"+strconv.FormatUint(gen, 10)).Result()
	if err != nil {
		return ""
	}
	now, err := e.RDB.Time(t.Context()).Result()
	dl, who, ok := strings.Cut(v, "|")
	ms, perr := strconv.ParseInt(dl, 10, 64)
	if err != nil || !ok || perr != nil || !time.UnixMilli(ms).After(now) {
		return ""
	}
	return who
}
