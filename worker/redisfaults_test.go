package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// An error of Redis while a valid record is claimed says nothing about the
// task: the record waits (nothing is dead-lettered, the task stays fired)
// and runs once Redis serves again. Two refusals: OOM (maxmemory reached
// with noeviction; the error the issue reproduced) and NOPERM (an ACL that
// refuses scripts: an error no "unavailable" predicate lists, so only the
// rule "every Redis error is transient, only an undecodable record is
// poison" keeps the task).
func TestRedisErrorAtClaimIsNotPoison(t *testing.T) {
	cases := []struct {
		name    string
		refuse  func(t *testing.T, admin *redis.Client)
		restore func(t *testing.T, admin *redis.Client)
	}{
		{"oom", func(t *testing.T, admin *redis.Client) {
			config(t, admin, "maxmemory-policy", "noeviction")
			config(t, admin, "maxmemory", "1")
		}, func(t *testing.T, admin *redis.Client) {
			config(t, admin, "maxmemory", "0")
		}},
		{"noperm", func(t *testing.T, admin *redis.Client) {
			acl(t, admin, "-evalsha", "-eval")
		}, func(t *testing.T, admin *redis.Client) {
			acl(t, admin, "+evalsha", "+eval")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			admin, wrdb := aclClients(t, e)
			led := newLedger()
			cfg, reg := e.config(t, "w1")
			cfg.Redis = wrdb
			r := start(t, cfg, reg, func(w *worker.Worker) {
				w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { led.record("w1", tk); return nil })
			})
			worktest.Schedule(t, e.Store, newTask("valid", "x"))
			msgs := e.fireByHand(t)
			if len(msgs) != 1 {
				t.Fatalf("fired %d records", len(msgs))
			}
			c.refuse(t, admin)
			if err := e.Firer.Writer.WriteMessages(t.Context(), msgs...); err != nil {
				t.Fatal(err)
			}
			requireRetriedUncommitted(t, e, reg, "claim", "valid")
			if n := r.handled(t, "hostile"); n != 0 {
				t.Fatalf("a valid record was dead-lettered (%v) because Redis refused a write", n)
			}
			if dead, err := e.Store.ListDead(t.Context(), 10); err != nil || len(dead) != 0 {
				t.Fatalf("dead listing %v, %v", dead, err)
			}
			c.restore(t, admin)
			e.WaitState(t, 15*time.Second, task.StateSucceeded, "valid")
			if n := led.count("valid"); n != 1 {
				t.Errorf("ran %d times", n)
			}
			testenv.WaitFor(t, 5*time.Second, "committed", func() bool { return e.committedTotal(t) == 1 })
			if n := r.handled(t, "hostile"); n != 0 {
				t.Errorf("%v records dead-lettered", n)
			}
		})
	}
}

func config(t *testing.T, rdb *redis.Client, key, value string) {
	t.Helper()
	if err := rdb.ConfigSet(t.Context(), key, value).Err(); err != nil {
		t.Fatalf("CONFIG SET %s %s: %v", key, value, err)
	}
}

// aclClients makes the ACL user dqworker (every command allowed for now)
// and returns the admin client and the worker's own client, logged in as
// dqworker.
func aclClients(t *testing.T, e *env) (admin, wrdb *redis.Client) {
	t.Helper()
	admin = e.RDB
	acl(t, admin, "+@all")
	wrdb = redis.NewClient(&redis.Options{Addr: e.Redis.Addr, Username: "dqworker", Password: "pw"})
	t.Cleanup(func() { _ = wrdb.Close() })
	return admin, wrdb
}

// requireRetriedUncommitted waits until the worker retried op at least
// twice against a refusing Redis, then requires the task id still fired and
// no record committed.
func requireRetriedUncommitted(t *testing.T, e *env, reg *prometheus.Registry, op, id string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "the "+op+" was refused and retried", func() bool {
		return metricSum(t, reg, "delayq_work_redis_retries_total", map[string]string{"op": op}) >= 2
	})
	if tk, err := e.Store.Get(t.Context(), id); err != nil || tk.State != task.StateFired {
		t.Fatalf("while Redis refuses the %s: %v, %v; want fired", op, tk, err)
	}
	if n := e.committedTotal(t); n != 0 {
		t.Fatalf("committed %d records before the %s was stored", n, op)
	}
}

// acl changes the rules of the ACL user dqworker (password pw, every key
// and channel).
func acl(t *testing.T, rdb *redis.Client, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", "dqworker", "on", ">pw", "~*", "&*"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := rdb.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %v: %v", rules, err)
	}
}

// An error of Redis while an outcome is stored (NOPERM here: an error no
// "unavailable" predicate lists) is retried like an unreachable Redis: the
// record stays uncommitted, the task stays fired, and the outcome is stored
// once Redis accepts the write. (OOM cannot be provoked here: Redis checks
// it only at a script's first write, and the finish script's first write,
// deleting the claim, frees memory.)
func TestRedisErrorAtFinishIsRetried(t *testing.T) {
	e := newEnv(t)
	admin, wrdb := aclClients(t, e)
	led := newLedger()
	started, release := make(chan struct{}, 1), make(chan struct{})
	cfg, reg := e.config(t, "w1")
	cfg.Redis = wrdb
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error {
			led.record("w1", tk)
			started <- struct{}{}
			<-release
			return nil
		})
	})
	worktest.Fire(t, e.Firer, newTask("hold", "x"))
	<-started
	acl(t, admin, "-evalsha", "-eval")
	close(release)
	requireRetriedUncommitted(t, e, reg, "finish", "hold")
	acl(t, admin, "+evalsha", "+eval")
	e.WaitState(t, 15*time.Second, task.StateSucceeded, "hold")
	testenv.WaitFor(t, 5*time.Second, "committed", func() bool { return e.committedTotal(t) == 1 })
	if n := led.count("hold"); n != 1 {
		t.Errorf("ran %d times", n)
	}
}

// An error of Redis while a rate-limit deferral is stored is retried: the
// record is not committed as if the deferral were stored (which left the
// task fired forever), and once Redis accepts the write the task waits for
// its turn and runs.
func TestRedisErrorAtDeferIsRetried(t *testing.T) {
	e := newEnv(t)
	admin, wrdb := aclClients(t, e)
	led := newLedger()
	cfg, reg := e.config(t, "w1")
	cfg.Redis = wrdb
	lim := &refusingLimiter{refuse: func() { acl(t, admin, "-evalsha", "-eval") }}
	cfg.Limiter = lim
	start(t, cfg, reg, func(w *worker.Worker) {
		w.HandleDefault(func(ctx context.Context, tk *worker.Task) error { led.record("w1", tk); return nil })
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	worktest.Fire(t, e.Firer, newTask("later", "x"))
	requireRetriedUncommitted(t, e, reg, "defer", "later")
	acl(t, admin, "+evalsha", "+eval")
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Firer.Run(ctx) }() // fires the deferred task again
	defer func() { cancel(); <-done }()
	e.WaitState(t, 15*time.Second, task.StateSucceeded, "later")
	if n := led.count("later"); n != 1 {
		t.Errorf("ran %d times", n)
	}
}

// refusingLimiter defers the first batch it sees (after calling refuse)
// and admits every later one.
type refusingLimiter struct {
	mu     sync.Mutex
	calls  int
	refuse func()
}

func (l *refusingLimiter) Admit(ctx context.Context, items []worker.LimitItem) ([]worker.LimitDecision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	ds := make([]worker.LimitDecision, len(items))
	for i := range ds {
		ds[i].Run = l.calls > 1
		ds[i].Reason = "test"
	}
	if l.calls == 1 {
		l.refuse()
	}
	return ds, nil
}

func (l *refusingLimiter) Done(context.Context, worker.LimitItem, worker.LimitDecision) {}
