package fire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// fixture is one Redis, one Kafka, a store and a producer.
type fixture struct {
	redis *testenv.Redis
	kafka *testenv.Kafka
	store *redisstore.Store
	prod  *Kafka
	m     *Metrics
	wakes *Wakeups
}

const otherTopic = "other.topic"

func newFixture(t *testing.T, shards int) *fixture {
	t.Helper()
	return newFixtureOn(t, shards, testenv.StartKafka(t, task.DefaultTopic, "dq.dead", otherTopic, "refused.topic"))
}

// newFixtureOn is newFixture on a given Kafka. The producer refreshes its
// metadata every 500ms, so that a topic a test creates is seen soon.
func newFixtureOn(t *testing.T, shards int, k *testenv.Kafka) *fixture {
	t.Helper()
	f := &fixture{redis: testenv.StartRedis(t), kafka: k}
	f.store = newStore(t, f.redis, uniqueNS("fire"), shards)
	f.prod = NewKafka(KafkaConfig{Brokers: f.kafka.Brokers, BatchSize: 500, MaxAttempts: 2, WriteTimeout: 2 * time.Second, MetadataTTL: 500 * time.Millisecond})
	t.Cleanup(func() { _ = f.prod.Close() })
	f.m = NewMetrics(prometheus.NewRegistry())
	f.wakes = NewWakeups(f.store.Client(), f.store.WakeChannel(), shards, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.wakes.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func (f *fixture) config(shard int, token int64) Config {
	return Config{
		Store: f.store, Producer: f.prod, Shard: shard, Token: token,
		Batch: 100, IdlePoll: 200 * time.Millisecond,
		Wake: f.wakes.Mailbox(shard), Metrics: f.m,
	}
}

func TestPollerFiresEveryTaskAtItsDueTimeWithThePinnedRecord(t *testing.T) {
	t.Parallel()
	const shards, n = 4, 300
	f := newFixture(t, shards)
	recs := f.kafka.Collect(t, task.DefaultTopic, otherTopic)
	for s := range shards {
		runPoller(t, NewPoller(f.config(s, int64(100+s))))
	}
	var tasks []*task.Task
	for i := range n {
		tk := &task.Task{
			ID:      fmt.Sprintf("fire-%03d", i),
			Type:    "email.send",
			Payload: []byte{0, 1, 2, byte(i), 0xff},
		}
		switch i % 4 {
		case 1:
			tk.Topic, tk.Key = otherTopic, "customer-"+strconv.Itoa(i%7)
		case 2:
			tk.Payload, tk.PayloadJSON = []byte(`{"n":`+strconv.Itoa(i)+`}`), true
			tk.Headers = map[string]string{"trace": "t" + strconv.Itoa(i), "a-first": "x"}
		case 3:
			tk.Priority, tk.Timeout, tk.MaxAttempts = -3, 1500*time.Millisecond, 4
		}
		tasks = append(tasks, tk)
	}
	// Due over the next second, in three groups.
	schedule(t, f.store, 0, tasks[:n/3]...)
	schedule(t, f.store, 500*time.Millisecond, tasks[n/3:2*n/3]...)
	schedule(t, f.store, time.Second, tasks[2*n/3:]...)
	testenv.WaitFor(t, 15*time.Second, "every task in Kafka", func() bool { return recs.Distinct() >= n })

	for _, tk := range tasks {
		rs := recs.Get(tk.ID)
		if len(rs) != 1 {
			t.Errorf("%s: %d records, want 1", tk.ID, len(rs))
			continue
		}
		r := rs[0]
		stored, err := f.store.Get(t.Context(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		due := task.Millis(stored.DueAt)
		wantTopic := task.DefaultTopic
		if tk.Topic != "" {
			wantTopic = tk.Topic
		}
		firedAt := hdrInt(t, r, record.HeaderFiredAt)
		switch {
		case r.Topic != wantTopic:
			t.Errorf("%s: topic %s, want %s", tk.ID, r.Topic, wantTopic)
		case string(r.Key) != tk.KafkaKey():
			t.Errorf("%s: key %q, want %q", tk.ID, r.Key, tk.KafkaKey())
		case !bytes.Equal(r.Value, tk.Payload):
			t.Errorf("%s: value %q, want %q", tk.ID, r.Value, tk.Payload)
		case hdrInt(t, r, record.HeaderDueAt) != due:
			t.Errorf("%s: dq-due-at %s, want %d", tk.ID, hdr(r, record.HeaderDueAt), due)
		case firedAt < due || r.Timestamp.UnixMilli() < due:
			t.Errorf("%s: fired early: due %d, dq-fired-at %d, timestamp %d", tk.ID, due, firedAt, r.Timestamp.UnixMilli())
		case r.Timestamp.UnixMilli() != firedAt:
			t.Errorf("%s: timestamp %d != dq-fired-at %d", tk.ID, r.Timestamp.UnixMilli(), firedAt)
		case hdr(r, record.HeaderType) != "email.send" || hdr(r, record.HeaderAttempt) != "1" || hdr(r, record.HeaderGen) != "0":
			t.Errorf("%s: type/attempt/gen headers %v", tk.ID, r.Headers)
		case hdr(r, record.HeaderContentType) != tk.ContentType():
			t.Errorf("%s: content type %q", tk.ID, hdr(r, record.HeaderContentType))
		case hdr(r, record.HeaderMaxAttempts) != strconv.Itoa(tk.Attempts()):
			t.Errorf("%s: max attempts %q", tk.ID, hdr(r, record.HeaderMaxAttempts))
		}
		wantTimeout, wantPrio := "", ""
		if tk.Timeout > 0 {
			wantTimeout = "1500"
		}
		if tk.Priority != 0 {
			wantPrio = "-3"
		}
		if hdr(r, record.HeaderTimeoutMS) != wantTimeout || hdr(r, record.HeaderPriority) != wantPrio {
			t.Errorf("%s: timeout/priority headers %q/%q", tk.ID, hdr(r, record.HeaderTimeoutMS), hdr(r, record.HeaderPriority))
		}
		for k, v := range tk.Headers {
			if hdr(r, k) != v {
				t.Errorf("%s: own header %s=%q, want %q", tk.ID, k, hdr(r, k), v)
			}
		}
	}
	testenv.WaitFor(t, 5*time.Second, "every task acked (fired)", func() bool {
		for _, tk := range tasks {
			st, err := f.store.Get(t.Context(), tk.ID)
			if err != nil || st.State != task.StateFired {
				return false
			}
		}
		return true
	})
	// a taken task reads as fired at once; the metrics follow Kafka's ack
	testenv.WaitFor(t, 5*time.Second, "every ack counted", func() bool { return metricValue(f.m.Fired) >= float64(n) })
	if got := metricValue(f.m.Fired); got != n {
		t.Errorf("fired_total = %v, want %d", got, n)
	}
	if got := histCount(f.m.Lag); got != n {
		t.Errorf("lag histogram has %d samples, want %d", got, n)
	}
}

func TestPollerWakesUpForASoonerTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	cfg := f.config(0, 1)
	cfg.IdlePoll = time.Minute // only a wake-up can fire the task in time
	var takes atomic.Int64
	withHooks(&cfg, &hookStore{beforeTake: func() { takes.Add(1) }})
	runPoller(t, NewPoller(cfg))
	testenv.WaitFor(t, 10*time.Second, "subscribed and the poller asleep", func() bool {
		return f.wakes.Subscriptions() > 0 && takes.Load() > 0 && f.wakes.Mailbox(0).until.Load() != 0
	})
	before := takes.Load()
	schedule(t, f.store, 100*time.Millisecond, &task.Task{ID: "wake-1", Type: "x"})
	testenv.WaitFor(t, 10*time.Second, "task fired long before the idle poll", func() bool { return recs.Distinct() == 1 })
	if n := takes.Load() - before; n > 3 {
		t.Errorf("%d takes for one wake-up, want at most 3", n)
	}
}

func TestMailboxWakesOnlyForSoonerTasks(t *testing.T) {
	m := NewMailbox()
	pending := func() bool {
		select {
		case <-m.C():
			return true
		default:
			return false
		}
	}
	m.Wake(5000) // busy poller: always kept
	if !pending() {
		t.Fatal("wake-up of a busy poller lost")
	}
	m.Arm(1000)
	m.Wake(2000)
	if pending() {
		t.Fatal("woken for a task due after the planned wake time")
	}
	m.Wake(999)
	if !pending() {
		t.Fatal("not woken for a sooner task")
	}
	m.Disarm()
	m.Wake(1)
	m.Wake(1)
	if !pending() || pending() {
		t.Fatal("a busy poller should get exactly one pending signal")
	}
}

func TestWakeupsDispatchAndResubscribeAfterRedisRestart(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	w := NewWakeups(rdb, "wake-test", 4, nil)
	w.HealthInterval = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	testenv.WaitFor(t, 5*time.Second, "subscribed", func() bool { return w.Subscriptions() == 1 })
	drain := func(s int) bool {
		select {
		case <-w.Mailbox(s).C():
			return true
		default:
			return false
		}
	}
	for s := range 4 {
		drain(s) // the subscription kicked everyone
	}
	w.Mailbox(2).Arm(10_000)
	if err := rdb.Publish(t.Context(), "wake-test", "2:5000").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "shard 2 woken", func() bool { return drain(2) })
	if drain(1) || drain(3) {
		t.Fatal("other shards woken")
	}
	for _, bad := range []string{"x", "9:1", "-1:1", "2:x"} {
		_ = rdb.Publish(t.Context(), "wake-test", bad).Err()
	}

	r.Restart(t)
	testenv.WaitFor(t, 10*time.Second, "subscribed again after the restart", func() bool { return w.Subscriptions() >= 2 })
	testenv.WaitFor(t, 5*time.Second, "every shard kicked after resubscribing", func() bool { return drain(0) })
	w.Mailbox(1).Arm(10_000)
	testenv.WaitFor(t, 10*time.Second, "wake-ups flow again", func() bool {
		_ = rdb.Publish(t.Context(), "wake-test", "1:1").Err()
		return drain(1)
	})
}

func TestPollerFencedLeaderCannotTakeOrAckAndStepsDown(t *testing.T) {
	t.Parallel()
	const n = 30
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	var tasks []*task.Task
	for i := range n {
		tasks = append(tasks, &task.Task{ID: fmt.Sprintf("fence-%02d", i), Type: "x", Payload: []byte("p")})
	}
	schedule(t, f.store, 0, tasks...)

	// Leader A (token 10) is paused between Kafka's answer and its ack.
	paused, resume := make(chan []*task.Task, 1), make(chan struct{})
	var once sync.Once
	cfgA := f.config(0, 10)
	withHooks(&cfgA, &hookStore{beforeAck: func(_ context.Context, ts []*task.Task) {
		once.Do(func() { paused <- ts; <-resume })
	}})
	a := runPoller(t, NewPoller(cfgA))
	var claimed []*task.Task
	select {
	case claimed = <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("leader A never reached its ack")
	}

	// A newer leader (token 20) adopts the shard and fires A's claims again.
	cfgB := f.config(0, 20)
	runPoller(t, NewPoller(cfgB))
	testenv.WaitFor(t, 10*time.Second, "every task fired by the new leader", func() bool {
		for _, tk := range tasks {
			ok := false
			for _, r := range recs.Get(tk.ID) {
				ok = ok || hdr(r, record.HeaderToken) == "20"
			}
			if !ok {
				return false
			}
		}
		return true
	})

	// A wakes up: its ack is refused and it steps down.
	close(resume)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("fenced leader did not stop")
	}
	if !errors.Is(a.err, redisstore.ErrFenced) {
		t.Fatalf("leader A ended with %v, want ErrFenced", a.err)
	}
	if _, err := f.store.Take(t.Context(), 0, 10, 10, time.Second); !errors.Is(err, redisstore.ErrFenced) {
		t.Errorf("take with the old token: %v, want ErrFenced", err)
	}
	fired := []redisstore.Fired{{ID: claimed[0].ID, Gen: claimed[0].Gen}}
	if _, _, err := f.store.Settle(t.Context(), 0, 10, "1:1", fired); !errors.Is(err, redisstore.ErrFenced) {
		t.Errorf("settle with the old token: %v, want ErrFenced", err)
	}
	if got := metricValue(f.m.Fenced); got != 1 {
		t.Errorf("fenced_total = %v, want 1", got)
	}
	if got := metricValue(f.m.LeaseReclaims); got != float64(len(claimed)) {
		t.Errorf("lease_reclaims_total = %v, want %d (the new leader's take re-claims what it adopted)", got, len(claimed))
	}
	testenv.WaitFor(t, 5*time.Second, "all tasks fired, every take settled", func() bool {
		for _, tk := range tasks {
			st, err := f.store.Get(t.Context(), tk.ID)
			if err != nil || st.State != task.StateFired || st.Gen != 0 {
				return false
			}
		}
		ss, err := f.store.Stats(t.Context())
		return err == nil && ss[0].Firing == 0
	})
	t.Logf("paused leader produced %d records that the new leader fired again (duplicates by design)", len(claimed))
}

func TestPollerGivesBackAfterFinishingItsBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var tasks []*task.Task
	for i := range 10 {
		tasks = append(tasks, &task.Task{ID: fmt.Sprintf("stop-%02d", i), Type: "x"})
	}
	schedule(t, f.store, 0, tasks...)
	stop := make(chan struct{})
	paused, resume := make(chan struct{}), make(chan struct{})
	cfg := f.config(0, 1)
	cfg.Stop = stop
	withHooks(&cfg, &hookStore{beforeAck: func(context.Context, []*task.Task) { close(paused); <-resume }})
	r := runPoller(t, NewPoller(cfg))
	<-paused
	close(stop)
	close(resume)
	<-r.done
	if r.err != nil {
		t.Fatalf("Run = %v, want nil after give-back", r.err)
	}
	for _, tk := range tasks {
		st, err := f.store.Get(t.Context(), tk.ID)
		if err != nil || st.State != task.StateFired {
			t.Errorf("%s: %v %v, want fired (batch finished before stopping)", tk.ID, st, err)
		}
	}
}

func TestPollerHoldsTakesWhileLeadershipIsUnconfirmed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var valid atomic.Bool
	var takes atomic.Int64
	cfg := f.config(0, 1)
	cfg.ValidUntil = func() time.Time {
		if valid.Load() {
			return time.Now().Add(time.Hour)
		}
		return time.Now().Add(-time.Second)
	}
	withHooks(&cfg, &hookStore{beforeTake: func() { takes.Add(1) }})
	runPoller(t, NewPoller(cfg))
	window := time.NewTimer(300 * time.Millisecond) // observation window, not a wait for a condition
	<-window.C
	if n := takes.Load(); n != 0 {
		t.Fatalf("%d takes while the lease was unconfirmed", n)
	}
	valid.Store(true)
	testenv.WaitFor(t, 5*time.Second, "takes resume", func() bool { return takes.Load() > 0 })
}

func TestPollerSurvivesKafkaOutageWithoutLosingTasks(t *testing.T) {
	t.Parallel()
	const shards, n = 2, 200
	f := newFixture(t, shards)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	// First the broker appends but answers REQUEST_TIMED_OUT (outcome
	// unknown: re-sent, duplicates), then it refuses everything.
	unknown := f.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1})
	for s := range shards {
		runPoller(t, NewPoller(f.config(s, 1)))
	}
	var tasks []*task.Task
	for i := range n {
		tasks = append(tasks, &task.Task{ID: fmt.Sprintf("outage-%03d", i), Type: "x"})
	}
	schedule(t, f.store, 0, tasks[:n/2]...)
	testenv.WaitFor(t, 10*time.Second, "produce attempts answered with timeouts", func() bool { return unknown.Hits() >= 2 })
	down := f.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	unknown.Remove()
	schedule(t, f.store, 200*time.Millisecond, tasks[n/2:]...)
	testenv.WaitFor(t, 10*time.Second, "produce refused", func() bool { return down.Hits() >= 4 })
	down.Remove()
	testenv.WaitFor(t, 20*time.Second, "every task in Kafka after the outage", func() bool { return recs.Distinct() == n })
	testenv.WaitFor(t, 5*time.Second, "every task acked", func() bool {
		for _, tk := range tasks {
			st, err := f.store.Get(t.Context(), tk.ID)
			if err != nil || st.State != task.StateFired {
				return false
			}
		}
		return true
	})
	dups := len(recs.All()) - n
	if metricValue(f.m.ProduceErrors) == 0 {
		t.Error("no produce errors counted during the outage")
	}
	t.Logf("kafka outage: %d tasks, %d records, %d duplicates, %v produce errors",
		n, len(recs.All()), dups, metricValue(f.m.ProduceErrors))
}

func TestPollerDeadLettersWhatCanNeverBeFired(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic, "dq.dead")
	f.kafka.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "refused.topic", Err: kerr.InvalidRecord, Count: -1})
	cfg := f.config(0, 1)
	cfg.PoisonGrace = 300 * time.Millisecond
	runPoller(t, NewPoller(cfg))

	// An unreadable record: the body of a stored record replaced behind
	// the store's back (its header intact), then made due.
	corrupt := &task.Task{ID: "corrupt-1", Type: "x", DueAt: time.Now().Add(time.Hour).Truncate(time.Millisecond)}
	res, err := f.store.Schedule(t.Context(), []redisstore.Submit{{Task: corrupt}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	ns := f.store.Namespace()
	bkey := fmt.Sprintf("dq:{%s:0}:t:%d", ns, testBucket(corrupt.ID))
	rec, err := f.store.Client().HGet(t.Context(), bkey, corrupt.ID).Result()
	if err != nil {
		t.Fatalf("stored record of %s not where expected: %v", corrupt.ID, err)
	}
	body := task.EncodeBody(corrupt)
	if !strings.HasSuffix(rec, string(body)) {
		t.Fatalf("stored record does not end with the task body")
	}
	bad := rec[:len(rec)-len(body)] + "\xff\xfe\xfd not a task body"
	if err := f.store.Client().HSet(t.Context(), bkey, corrupt.ID, bad).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Reschedule(t.Context(), corrupt.ID, time.Time{}, 0, true); err != nil {
		t.Fatal(err)
	}
	schedule(t, f.store, 0,
		&task.Task{ID: "refused-1", Type: "x", Topic: "refused.topic", Payload: []byte("kept")},
		&task.Task{ID: "fine-1", Type: "x"})

	testenv.WaitFor(t, 10*time.Second, "three records", func() bool { return recs.Distinct() == 3 })
	for _, id := range []string{"corrupt-1", "refused-1"} {
		rs := recs.Get(id)
		if rs[0].Topic != "dq.dead" || hdr(rs[0], record.HeaderError) == "" {
			t.Errorf("%s: topic %s error %q, want dq.dead with dq-error", id, rs[0].Topic, hdr(rs[0], record.HeaderError))
		}
	}
	if string(recs.Get("refused-1")[0].Value) != "kept" {
		t.Error("dead-lettered record lost its payload")
	}
	if recs.Get("fine-1")[0].Topic != task.DefaultTopic {
		t.Error("a normal task did not fire to its topic")
	}
	testenv.WaitFor(t, 5*time.Second, "refused task dead", func() bool {
		st, err := f.store.Get(t.Context(), "refused-1")
		return err == nil && st.State == task.StateDead && strings.Contains(st.LastError, "refused.topic")
	})
	// counted after Kafka acked the dead records, which the consumer may
	// see first
	testenv.WaitFor(t, 5*time.Second, "dead letters counted", func() bool { return metricValue(f.m.DeadLettered) >= 2 })
}

// With Ahead, the take runs before the due time and the record is produced
// at it: the task is out of the due set (fired) while nothing is in Kafka
// yet, and its record is never early.
func TestPollerTakesAheadAndFiresAtTheDueInstant(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	cfg := f.config(0, 1)
	cfg.Ahead = time.Second
	runPoller(t, NewPoller(cfg))
	tk, due := scheduleTakenAhead(t, f, "ahead-1", 3*time.Second)
	at, err := f.store.Client().Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !at.Before(due) {
		t.Fatalf("taken only at %v, due %v: not ahead", at, due)
	}
	if n := recs.Distinct(); n != 0 {
		t.Fatalf("%d records in Kafka %v before the due time %v", n, at, due)
	}
	testenv.WaitFor(t, 5*time.Second, "record in Kafka", func() bool { return recs.Distinct() == 1 })
	r := recs.Get(tk.ID)[0]
	if fired := hdrInt(t, r, record.HeaderFiredAt); fired < task.Millis(due) || r.Timestamp.UnixMilli() < task.Millis(due) {
		t.Fatalf("fired early: due %d, dq-fired-at %d, timestamp %d", task.Millis(due), fired, r.Timestamp.UnixMilli())
	}
	// the lag is observed once Kafka acked the produce, which a consumer
	// may see the record before
	testenv.WaitFor(t, 5*time.Second, "the firing lag observed", func() bool { return histCount(f.m.Lag) > 0 })
	if got := histCount(f.m.Lag); got != 1 {
		t.Errorf("lag histogram has %d samples, want 1", got)
	}
}

// A leader that loses its leadership while it holds a batch taken ahead
// produces nothing and releases the batch: the next leader fires it, on
// time.
func TestPollerReleasesABatchTakenAheadWhenLeadershipEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	recs := f.kafka.Collect(t, task.DefaultTopic)
	cfg := f.config(0, 1)
	cfg.Ahead = 3 * time.Second
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- NewPoller(cfg).Run(ctx) }()
	tk, due := scheduleTakenAhead(t, f, "ahead-2", 4*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("poller: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the poller did not stop while its batch waited for the due time")
	}
	if st, err := f.store.Get(t.Context(), tk.ID); err != nil || st.State != task.StateScheduled {
		t.Fatalf("after the leadership ended: %+v %v, want scheduled again", st, err)
	}
	at, err := f.store.Client().Time(t.Context()).Result()
	if err != nil || !at.Before(due) {
		t.Fatalf("the check ran at %v, after the due time %v (%v)", at, due, err)
	}
	if n := recs.Distinct(); n != 0 {
		t.Fatalf("%d records produced by a leader that stopped before the due time", n)
	}
	next := f.config(0, 2)
	runPoller(t, NewPoller(next))
	testenv.WaitFor(t, 10*time.Second, "fired by the next leader", func() bool { return recs.Distinct() == 1 })
	r := recs.Get(tk.ID)[0]
	if r.Timestamp.UnixMilli() < task.Millis(due) {
		t.Fatalf("fired early: due %d, timestamp %d", task.Millis(due), r.Timestamp.UnixMilli())
	}
}

// scheduleTakenAhead schedules task id due in from Redis' now and waits
// until a poller took it (fired) before its due time.
func scheduleTakenAhead(t *testing.T, f *fixture, id string, in time.Duration) (*task.Task, time.Time) {
	t.Helper()
	now, err := f.store.Client().Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	due := now.Add(in).Truncate(time.Millisecond)
	tk := &task.Task{ID: id, Type: "x", DueAt: due}
	res, err := f.store.Schedule(t.Context(), []redisstore.Submit{{Task: tk}})
	if err != nil || res[0].Outcome != redisstore.Created {
		t.Fatalf("schedule: %+v %v", res, err)
	}
	testenv.WaitFor(t, 5*time.Second, "task taken ahead", func() bool {
		st, err := f.store.Get(t.Context(), tk.ID)
		return err == nil && st.State == task.StateFired
	})
	return tk, due
}
