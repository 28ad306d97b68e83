package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/election"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testenv"
)

// startOperatorDaemon runs a real daemon on real Redis and, with etcd, a
// real embedded etcd (pause states, limits, the process registry). It
// returns the server URL and a store on the daemon's namespace.
func startOperatorDaemon(t *testing.T, token string, etcd bool) (string, *redisstore.Store) {
	t.Helper()
	url, st, _, _ := startOperatorDaemonEtcd(t, token, etcd)
	return url, st
}

// startOperatorDaemonEtcd is startOperatorDaemon that also returns the
// etcd server (nil without) and the namespace.
func startOperatorDaemonEtcd(t *testing.T, token string, etcd bool) (string, *redisstore.Store, *testenv.Etcd, string) {
	t.Helper()
	var e *testenv.Etcd
	r := testenv.StartRedis(t)
	cfg := daemon.DefaultConfig()
	cfg.Namespace = "client-" + strings.ReplaceAll(t.Name(), "/", "-")
	cfg.RedisAddrs = []string{r.Addr}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.JournalDir = t.TempDir()
	cfg.APIToken = token
	cfg.ShutdownGrace = 5 * time.Second
	cfg.MaxBatch = 1000
	cfg.EtcdEndpoints = nil // the default names a local etcd
	if etcd {
		e = testenv.StartEtcd(t)
		cfg.EtcdEndpoints = e.Endpoints
	}
	app, err := daemon.New(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	st, err := redisstore.New(t.Context(), r.Client(t), redisstore.Options{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, st, e, cfg.Namespace
}

// scheduleN schedules n tasks of typ with ids prefix-0.. due from due on,
// one millisecond apart, in batches.
func scheduleN(t *testing.T, c *client.Client, prefix, typ string, n int, due time.Time) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += 1000 {
		batch := make([]client.Task, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			ids = append(ids, id)
			batch = append(batch, client.Task{ID: id, Type: typ, DueAt: due.Add(time.Duration(i) * time.Millisecond)})
		}
		res, err := c.ScheduleBatch(t.Context(), batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("schedule %s: %v", r.ID, r.Err)
			}
		}
	}
	return ids
}

// taken is a task claimed by takeAll.
type taken struct {
	gen   uint64
	shard int
}

// takeAll takes (fires) the given tasks, due now, as an event process
// would: a take claims every due task of a shard, so the ids are gathered
// shard by shard until each was seen.
func takeAll(t *testing.T, st *redisstore.Store, ids ...string) map[string]taken {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	got := map[string]taken{}
	testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("%v taken", ids), func() bool {
		for id := range want {
			if _, ok := got[id]; ok {
				continue
			}
			tk, err := st.Take(t.Context(), st.Shard(id), 1, 1000, time.Minute)
			if err != nil {
				return false
			}
			for _, x := range tk.Tasks {
				if want[x.ID] {
					got[x.ID] = taken{gen: x.Gen, shard: x.Shard}
				}
			}
		}
		return len(got) == len(want)
	})
	return got
}

// kill makes tasks (scheduled due now) dead, as a worker would.
func kill(t *testing.T, st *redisstore.Store, ids ...string) {
	t.Helper()
	for id, tk := range takeAll(t, st, ids...) {
		if _, err := st.Finish(t.Context(), redisstore.Finish{ID: id, Gen: tk.gen, Kind: redisstore.Dead, Error: "boom " + id}); err != nil {
			t.Fatal(err)
		}
	}
}

// collect walks c.Tasks(o) and fails on an error.
func collect(t *testing.T, c *client.Client, o client.ListOptions) []client.ListedTask {
	t.Helper()
	var out []client.ListedTask
	for tk, err := range c.Tasks(t.Context(), o) {
		if err != nil {
			t.Fatalf("Tasks(%+v): %v", o, err)
		}
		out = append(out, tk)
	}
	return out
}

func ids(ts []client.ListedTask) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.ID
	}
	return out
}

// TestListTasks: the iterator walks every task of a state once across all
// shards, in small pages, with the filters applied, in due order across
// the shards; a stopped range stops; bad options are refused with a 4xx
// naming the parameter.
func TestListTasks(t *testing.T) {
	url, _ := startOperatorDaemon(t, "tok", false)
	ctx := t.Context()
	c := client.New(url, client.WithToken("tok"))
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	a := scheduleN(t, c, "a", "alpha", 230, due)
	b := scheduleN(t, c, "b", "beta", 40, due.Add(time.Minute))

	all := collect(t, c, client.ListOptions{Limit: 7})
	got := ids(all)
	slices.Sort(got)
	inDueOrder := append(slices.Clone(a), b...) // each due 1 ms after the one before
	want := slices.Clone(inDueOrder)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("walked %d tasks, want the %d scheduled (each once)", len(got), len(want))
	}
	shards := map[int]bool{}
	for i, tk := range all {
		shards[tk.Shard] = true
		if tk.State != client.StateScheduled || tk.DueAt.IsZero() || !tk.DiedAt.IsZero() || tk.Attempt != 1 {
			t.Fatalf("task %+v", tk)
		}
		if i > 0 {
			prev := all[i-1]
			if tk.DueAt.Before(prev.DueAt) || tk.ID != inDueOrder[i] {
				t.Fatalf("order: %s (shard %d, due %v) after %s (shard %d, due %v)", tk.ID, tk.Shard, tk.DueAt, prev.ID, prev.Shard, prev.DueAt)
			}
		}
	}
	if len(shards) < 8 {
		t.Errorf("the tasks are on %d shards only; the walk should cross many", len(shards))
	}

	if beta := collect(t, c, client.ListOptions{Type: "beta", Limit: 1000}); len(beta) != len(b) {
		t.Errorf("type beta: %d tasks, want %d", len(beta), len(b))
	}
	// due_after inclusive, due_before exclusive: alpha's tasks 100..199.
	window := collect(t, c, client.ListOptions{Type: "alpha", DueAfter: due.Add(100 * time.Millisecond), DueBefore: due.Add(200 * time.Millisecond)})
	if len(window) != 100 {
		t.Errorf("due window: %d tasks, want 100", len(window))
	}
	for _, tk := range window {
		if tk.DueAt.Before(due.Add(100*time.Millisecond)) || !tk.DueAt.Before(due.Add(200*time.Millisecond)) {
			t.Errorf("%s due %v outside the window", tk.ID, tk.DueAt)
		}
	}
	if none := collect(t, c, client.ListOptions{State: client.StateDead}); len(none) != 0 {
		t.Errorf("dead: %d tasks, want none", len(none))
	}

	// One page by hand, then its cursor.
	p, err := c.ListTasks(ctx, client.ListOptions{Type: "beta", Limit: 30})
	if err != nil || len(p.Tasks) > 30 || p.NextCursor == "" {
		t.Fatalf("first page: %d tasks, cursor %q, %v", len(p.Tasks), p.NextCursor, err)
	}
	seen := len(p.Tasks)
	for p.NextCursor != "" {
		if p, err = c.ListTasks(ctx, client.ListOptions{Type: "beta", Limit: 30, Cursor: p.NextCursor}); err != nil {
			t.Fatal(err)
		}
		seen += len(p.Tasks)
	}
	if seen != len(b) {
		t.Errorf("paged by hand: %d tasks, want %d", seen, len(b))
	}

	// A range stopped early asks for no further page.
	n := 0
	for _, err := range c.Tasks(ctx, client.ListOptions{Limit: 5}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 12 {
			break
		}
	}
	if n != 12 {
		t.Errorf("stopped range: %d tasks", n)
	}

	for _, tc := range []struct {
		o     client.ListOptions
		field string
	}{
		{client.ListOptions{State: "nope"}, "state"},
		{client.ListOptions{Limit: 5000}, "limit"},
		{client.ListOptions{Limit: -1}, "limit"},
		{client.ListOptions{Cursor: "garbage"}, "cursor"},
		{client.ListOptions{Type: "has space"}, "type"},
	} {
		_, err := c.ListTasks(ctx, tc.o)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 499 || !strings.Contains(ae.Message, tc.field) {
			t.Errorf("ListTasks(%+v): %v, want a 4xx naming %s", tc.o, err, tc.field)
		}
		var walked error
		for _, err := range c.Tasks(ctx, tc.o) {
			walked = err
		}
		if !errors.As(walked, &ae) {
			t.Errorf("Tasks(%+v) yielded %v, want the APIError", tc.o, walked)
		}
	}
	var ae *client.APIError
	if _, err := client.New(url, client.WithToken("wrong")).ListTasks(ctx, client.ListOptions{}); !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("wrong token: %v", err)
	}
}

// TestBulk: cancel by ids and by filter, redrive and delete dead tasks by
// ids, type and all; each counts what it changed and a repeat changes
// nothing. A filter matching more than one request's bound (10,000) is
// repeated until done.
func TestBulk(t *testing.T) {
	url, st := startOperatorDaemon(t, "", false)
	ctx := t.Context()
	c := client.New(url)
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	scheduleN(t, c, "x", "ex", 5, due)
	big := scheduleN(t, c, "big", "bulk", 10200, due.Add(time.Minute))

	n, err := c.CancelTasks(ctx, client.Selection{IDs: []string{"x-0", "x-1", "nope", "x-1"}})
	if err != nil || n != 2 {
		t.Fatalf("cancel by ids: %d, %v; want 2", n, err)
	}
	if n, err = c.CancelTasks(ctx, client.Selection{IDs: []string{"x-0", "x-1"}}); err != nil || n != 0 {
		t.Fatalf("cancel by ids again: %d, %v; want 0", n, err)
	}
	if tk, err := c.Get(ctx, "x-0"); err != nil || tk.State != client.StateCancelled {
		t.Fatalf("x-0 after cancel: %+v, %v", tk, err)
	}
	if n, err = c.CancelTasks(ctx, client.Selection{Type: "ex", DueBefore: due.Add(3 * time.Millisecond)}); err != nil || n != 1 {
		t.Fatalf("cancel ex due before +3ms: %d, %v; want 1 (x-2)", n, err)
	}
	if n, err = c.CancelTasks(ctx, client.Selection{Type: "bulk"}); err != nil || n != len(big) {
		t.Fatalf("cancel %d tasks of type bulk: %d, %v", len(big), n, err)
	}
	if left := collect(t, c, client.ListOptions{Limit: 1000}); len(left) != 2 {
		t.Fatalf("waiting after the cancels: %v, want x-3 and x-4", ids(left))
	}
	if n, err = c.CancelTasks(ctx, client.Selection{All: true}); err != nil || n != 2 {
		t.Fatalf("cancel all: %d, %v; want 2", n, err)
	}

	// Dead tasks: d-0..d-3 of type dt, e-0..e-1 of type et.
	dead := append(scheduleN(t, c, "d", "dt", 4, time.Now()), scheduleN(t, c, "e", "et", 2, time.Now())...)
	kill(t, st, dead...)
	listed := collect(t, c, client.ListOptions{State: client.StateDead, Limit: 2})
	if len(listed) != 6 {
		t.Fatalf("dead listed: %v", ids(listed))
	}
	for _, d := range listed {
		if d.State != client.StateDead || d.DiedAt.IsZero() || d.LastError != "boom "+d.ID {
			t.Errorf("dead task %+v", d)
		}
	}
	if n, err = c.RedriveDeadTasks(ctx, client.Selection{IDs: []string{"d-0", "nope", "x-3"}}); err != nil || n != 1 {
		t.Fatalf("redrive by ids: %d, %v; want 1", n, err)
	}
	if n, err = c.RedriveDeadTasks(ctx, client.Selection{Type: "dt"}); err != nil || n != 3 {
		t.Fatalf("redrive type dt: %d, %v; want 3", n, err)
	}
	if n, err = c.RedriveDeadTasks(ctx, client.Selection{Type: "dt"}); err != nil || n != 0 {
		t.Fatalf("redrive type dt again: %d, %v; want 0", n, err)
	}
	if tk, err := c.Get(ctx, "d-3"); err != nil || tk.State != client.StateScheduled {
		t.Fatalf("d-3 after redrive: %+v, %v", tk, err)
	}
	if n, err = c.DeleteDeadTasks(ctx, client.Selection{IDs: []string{"e-0", "d-1", "nope"}}); err != nil || n != 1 {
		t.Fatalf("delete by ids: %d, %v; want 1 (e-0)", n, err)
	}
	kill(t, st, "d-1", "d-2")
	if n, err = c.DeleteDeadTasks(ctx, client.Selection{Type: "dt"}); err != nil || n != 2 {
		t.Fatalf("delete type dt: %d, %v; want 2", n, err)
	}
	if n, err = c.DeleteDeadTasks(ctx, client.Selection{All: true}); err != nil || n != 1 {
		t.Fatalf("delete all: %d, %v; want 1 (e-1)", n, err)
	}
	if _, err := c.Get(ctx, "e-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("e-1 after delete: %v", err)
	}

	// The selection is checked before any request.
	for _, s := range []client.Selection{
		{},
		{IDs: []string{}},
		{IDs: []string{"a"}, Type: "t"},
		{Type: "t", All: true},
		{IDs: []string{"a"}, All: true},
	} {
		if _, err := c.CancelTasks(ctx, s); err == nil || errors.As(err, new(*client.APIError)) {
			t.Errorf("CancelTasks(%+v): %v, want a client-side error", s, err)
		}
	}
	if _, err := c.RedriveDeadTasks(ctx, client.Selection{DueBefore: time.Now()}); err == nil || !strings.Contains(err.Error(), "type only") {
		t.Errorf("redrive with due bounds: %v", err)
	}
	if _, err := c.DeleteDeadTasks(ctx, client.Selection{Type: "t", DueAfter: time.Now()}); err == nil || !strings.Contains(err.Error(), "type only") {
		t.Errorf("delete dead with due bounds: %v", err)
	}
	// An id the daemon refuses is its 4xx, nothing changed.
	var ae *client.APIError
	if n, err := c.CancelTasks(ctx, client.Selection{IDs: []string{"ok", "has space"}}); n != 0 || !errors.As(err, &ae) || !strings.Contains(ae.Message, "ids[1]") {
		t.Errorf("cancel a bad id: %d, %v", n, err)
	}
}

// TestTypesAndLimits: pause and resume a type (idempotent), GET /v1/types
// with the pause state and limits, parked tasks counted and put back by a
// resume, and the limits API.
func TestTypesAndLimits(t *testing.T) {
	url, st := startOperatorDaemon(t, "tok", true)
	ctx := t.Context()
	c := client.New(url, client.WithToken("tok"))
	scheduleN(t, c, "s", "seen.type", 1, time.Now().Add(time.Hour))

	s, err := c.PauseType(ctx, "email.send")
	if err != nil || *s != (client.TypeState{Type: "email.send", Paused: true, Changed: true}) {
		t.Fatalf("pause: %+v, %v", s, err)
	}
	if s, err = c.PauseType(ctx, "email.send"); err != nil || s.Changed || !s.Paused {
		t.Fatalf("pause again: %+v, %v", s, err)
	}
	rule := client.LimitRule{
		WindowQuota: &client.WindowQuota{Limit: 100, Window: client.Duration(time.Minute)},
		TokenBucket: &client.TokenBucket{Rate: 2.5, Burst: 5},
		Concurrency: &client.Concurrency{Limit: 3},
	}
	l, err := c.SetLimit(ctx, "pdf.render", rule)
	if err != nil || l.Type != "pdf.render" || l.Rule.WindowQuota == nil || time.Duration(l.Rule.WindowQuota.Window) != time.Minute ||
		l.Rule.TokenBucket.Rate != 2.5 || time.Duration(l.Rule.Concurrency.SlotTTL) != 5*time.Minute || l.Usage == nil {
		t.Fatalf("set limit: %+v, %v", l, err)
	}
	types, err := c.Types(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]client.TypeInfo{}
	for _, ti := range types {
		byName[ti.Type] = ti
	}
	if e := byName["email.send"]; !e.Paused || e.PausedAt.IsZero() || time.Since(e.PausedAt) > time.Minute || e.Limit != nil {
		t.Errorf("email.send: %+v", e)
	}
	if p := byName["pdf.render"]; p.Paused || p.Limit == nil || p.Limit.Concurrency == nil || p.Limit.Concurrency.Limit != 3 {
		t.Errorf("pdf.render: %+v", p)
	}
	if _, ok := byName["seen.type"]; !ok {
		t.Errorf("seen.type (scheduled through this daemon) not listed: %+v", types)
	}

	// Two tasks of email.send parked by a worker, then resumed.
	parked := scheduleN(t, c, "p", "email.send", 2, time.Now())
	for id, tk := range takeAll(t, st, parked...) {
		res, err := st.ClaimMany(ctx, []redisstore.Claim{{ID: id, Gen: tk.gen, TTL: time.Minute, Owner: "w1", Shard: tk.shard, ShardSet: true}})
		if err != nil || res[0].Code != redisstore.Claimed {
			t.Fatalf("claim %s: %+v, %v", id, res, err)
		}
		if n, err := st.ParkMany(ctx, []redisstore.Park{{ID: id, Gen: tk.gen, Type: "email.send", Owner: "w1", Shard: tk.shard}}); err != nil || n != 1 {
			t.Fatalf("park %s: %d, %v", id, n, err)
		}
	}
	if ps := collect(t, c, client.ListOptions{State: client.StatePaused}); !slices.Equal(sorted(ids(ps)), parked) {
		t.Errorf("paused tasks listed: %v, want %v", ids(ps), parked)
	}
	if types, err = c.Types(ctx); err != nil || !slices.ContainsFunc(types, func(ti client.TypeInfo) bool { return ti.Type == "email.send" && ti.Parked == 2 }) {
		t.Errorf("types with 2 parked: %+v, %v", types, err)
	}
	if s, err = c.ResumeType(ctx, "email.send"); err != nil || s.Paused || !s.Changed || s.Resumed != 2 || s.UnparkError != "" {
		t.Fatalf("resume: %+v, %v", s, err)
	}
	if s, err = c.ResumeType(ctx, "email.send"); err != nil || s.Changed || s.Resumed != 0 {
		t.Fatalf("resume again: %+v, %v", s, err)
	}
	if tk, err := c.Get(ctx, parked[0]); err != nil || tk.State != client.StateScheduled || tk.Attempt != 1 {
		t.Errorf("%s after resume: %+v, %v", parked[0], tk, err)
	}

	var ae *client.APIError
	for _, bad := range []string{"has space", strings.Repeat("x", 300)} {
		if _, err := c.PauseType(ctx, bad); !errors.As(err, &ae) || ae.Status/100 != 4 || !strings.Contains(ae.Message, "type") {
			t.Errorf("pause %q: %v, want a 4xx naming the type", bad, err)
		}
	}

	if _, err := c.PauseType(ctx, ""); err == nil || errors.As(err, &ae) {
		t.Errorf("pause an empty type: %v, want a client-side error", err)
	}
	if _, err := c.SetLimit(ctx, "", client.LimitRule{}); err == nil || errors.As(err, &ae) {
		t.Errorf("set the limit of an empty type: %v, want a client-side error", err)
	}

	// Limits: list, get, invalid, delete.
	ls, err := c.Limits(ctx)
	if err != nil || len(ls) != 1 || ls[0].Type != "pdf.render" || ls[0].Rule.TokenBucket == nil || ls[0].Rule.TokenBucket.Burst != 5 {
		t.Fatalf("limits: %+v, %v", ls, err)
	}
	if g, err := c.GetLimit(ctx, "pdf.render"); err != nil || g.Rule.WindowQuota.Limit != 100 {
		t.Fatalf("get limit: %+v, %v", g, err)
	}
	if _, err := c.SetLimit(ctx, "bad", client.LimitRule{WindowQuota: &client.WindowQuota{Limit: -1, Window: client.Duration(time.Minute)}}); !errors.As(err, &ae) ||
		ae.Status != 422 || ae.Code != "invalid_rule" || !strings.Contains(ae.Message, "window_quota.limit") {
		t.Errorf("invalid rule: %v", err)
	}
	if _, err := c.SetLimit(ctx, "bad", client.LimitRule{}); !errors.As(err, &ae) || ae.Status != 422 {
		t.Errorf("empty rule: %v", err)
	}
	if err := c.DeleteLimit(ctx, "pdf.render"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLimit(ctx, "pdf.render"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
	if _, err := c.GetLimit(ctx, "pdf.render"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// TestClusterAndOpenAPI: GET /v1/cluster answers every shard with the
// backlog, GET /v1/openapi.yaml the spec; without etcd the type endpoints
// answer 503 naming the setting, and the cluster names etcd.
func TestClusterAndOpenAPI(t *testing.T) {
	url, _, etcd, ns := startOperatorDaemonEtcd(t, "tok", true)
	ctx := t.Context()
	c := client.New(url, client.WithToken("tok"))
	scheduleN(t, c, "late", "t", 3, time.Now().Add(-time.Minute))
	// An event process, as the registry and a shard election in etcd
	// show it: it leads shard 3.
	ec := etcd.Client(t)
	started := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	proc, _ := json.Marshal(registry.Proc{ID: "event-x", Kind: "event", Version: "v9", Addr: "127.0.0.1:9091", StartedAt: started, Ready: false, Reason: "kafka down"})
	lease, err := ec.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Put(ctx, registry.Key(ns, "event", "event-x"), string(proc), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Put(ctx, election.CandidateKey(ns, 3, int64(lease.ID)), "event-x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	scheduleN(t, c, "soon", "t", 4, time.Now().Add(time.Hour))

	cl, err := c.Cluster(ctx)
	if err != nil || cl.ShardCount != 16 || len(cl.Shards) != 16 || !cl.RedisUp || cl.RedisError != "" || cl.EtcdError != "" || !strings.HasPrefix(cl.Namespace, "client-") {
		t.Fatalf("cluster: %+v, %v", cl, err)
	}
	var pending, overdue int64
	var oldest time.Duration
	for i, s := range cl.Shards {
		if s.Shard != i {
			t.Errorf("shard %d at %d", s.Shard, i)
		}
		pending += s.Pending
		overdue += s.Overdue
		oldest = max(oldest, s.OldestOverdue())
	}
	if pending != 7 || overdue != 3 || oldest < 50*time.Second || oldest > 10*time.Minute {
		t.Errorf("pending %d, overdue %d, oldest %v; want 7, 3, about a minute", pending, overdue, oldest)
	}
	for i, s := range cl.Shards {
		if want := (i == 3); (s.Leader != nil) != want {
			t.Errorf("shard %d leader %+v", i, s.Leader)
		}
	}
	if l := cl.Shards[3].Leader; l == nil || *l != (client.Leader{ID: "event-x", Addr: "127.0.0.1:9091"}) {
		t.Errorf("shard 3 leader: %+v", l)
	}
	i := slices.IndexFunc(cl.Processes, func(p client.Process) bool { return p.ID == "event-x" })
	if i < 0 || !reflect.DeepEqual(cl.Processes[i], client.Process{ID: "event-x", Kind: "event", Version: "v9", Addr: "127.0.0.1:9091", Ready: false, Reason: "kafka down", StartedAt: started}) {
		t.Errorf("processes: %+v", cl.Processes)
	}

	spec, err := c.OpenAPI(ctx)
	if err != nil || !strings.Contains(string(spec), "openapi: 3.1") || !strings.Contains(string(spec), "/v1/tasks/cancel:") {
		t.Fatalf("openapi: %.200q, %v", spec, err)
	}

	noEtcd, _ := startOperatorDaemon(t, "", false)
	c = client.New(noEtcd)
	var ae *client.APIError
	if _, err := c.PauseType(ctx, "t"); !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "unavailable" || !strings.Contains(ae.Message, "DQ_ETCD_ENDPOINTS") {
		t.Errorf("pause without etcd: %v", err)
	}
	if _, err := c.Types(ctx); !errors.As(err, &ae) || ae.Status != 503 {
		t.Errorf("types without etcd: %v", err)
	}
	if cl, err := c.Cluster(ctx); err != nil || cl.EtcdError == "" || !cl.RedisUp {
		t.Errorf("cluster without etcd: %+v, %v", cl, err)
	}
}

// bulkFake answers bulk requests from a script of answers and records the
// bodies, for what a real daemon does not show: how many requests a bulk
// took and how the ids were cut.
type bulkFake struct {
	mu      sync.Mutex
	answers []string // one per request, the last repeated; an error body is a 503
	bodies  []string
	paths   []string
}

func (f *bulkFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, _ := io.ReadAll(r.Body)
	f.bodies = append(f.bodies, string(b))
	f.paths = append(f.paths, r.Method+" "+r.URL.RequestURI())
	a := f.answers[min(len(f.bodies)-1, len(f.answers)-1)]
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(a, `{"error"`) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = io.WriteString(w, a)
}

func newBulkFake(t *testing.T, answers ...string) (*bulkFake, *client.Client) {
	t.Helper()
	f := &bulkFake{answers: answers}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, client.New(srv.URL)
}

// TestBulkRepeatsAndChunks: a bulk is repeated while the daemon answers
// more and sums the counts; ids go in chunks of MaxBulkIDs; a daemon that
// answers more without changing anything ends the loop with ErrNoProgress;
// the filter's times go out in RFC 3339.
func TestBulkRepeatsAndChunks(t *testing.T) {
	ctx := t.Context()
	f, c := newBulkFake(t, `{"changed":500,"more":true}`, `{"changed":20,"more":true}`, `{"changed":3,"more":false}`)
	after := time.Date(2030, 1, 2, 3, 4, 5, 6000000, time.FixedZone("x", 3600))
	n, err := c.CancelTasks(ctx, client.Selection{Type: "t", DueAfter: after})
	if err != nil || n != 523 || len(f.bodies) != 3 {
		t.Fatalf("cancel by filter: %d, %v after %d requests; want 523 after 3", n, err, len(f.bodies))
	}
	if f.bodies[0] != `{"filter":{"type":"t","due_after":"2030-01-02T02:04:05.006Z"}}` || f.bodies[2] != f.bodies[0] || f.paths[0] != "POST /v1/tasks/cancel" {
		t.Errorf("request: %s %s", f.paths[0], f.bodies[0])
	}

	f, c = newBulkFake(t, `{"changed":0,"more":false}`)
	many := make([]string, 2*client.MaxBulkIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("id-%d", i)
	}
	if _, err := c.RedriveDeadTasks(ctx, client.Selection{IDs: many}); err != nil || len(f.bodies) != 3 {
		t.Fatalf("redrive %d ids: %v after %d requests, want 3", len(many), err, len(f.bodies))
	}
	for i, want := range []int{client.MaxBulkIDs, client.MaxBulkIDs, 1} {
		var body struct {
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal([]byte(f.bodies[i]), &body); err != nil || len(body.IDs) != want || body.IDs[0] != many[i*client.MaxBulkIDs] {
			t.Errorf("chunk %d: %d ids, %v", i, len(body.IDs), err)
		}
	}

	f, c = newBulkFake(t, `{"changed":0,"more":true}`)
	if n, err := c.DeleteDeadTasks(ctx, client.Selection{Type: "a b&c"}); !errors.Is(err, client.ErrNoProgress) || n != 0 || len(f.bodies) != 3 {
		t.Errorf("stuck daemon: %d, %v after %d requests", n, err, len(f.bodies))
	}
	if f.paths[0] != "DELETE /v1/dead?type=a+b%26c" || f.bodies[0] != "" {
		t.Errorf("delete dead by type: %s %q", f.paths[0], f.bodies[0])
	}
	f, c = newBulkFake(t, `{"changed":0,"more":false}`)
	if _, err := c.RedriveDeadTasks(ctx, client.Selection{All: true}); err != nil || f.bodies[0] != `{"filter":{}}` {
		t.Errorf("redrive all: %v, body %s", err, f.bodies[0])
	}
	// (issue 40: a DELETE /v1/dead that names nothing is refused; all is
	// the empty filter, as for the other bulk requests)
	if _, err := c.DeleteDeadTasks(ctx, client.Selection{All: true}); err != nil || f.paths[1] != "DELETE /v1/dead" || f.bodies[1] != `{"filter":{}}` {
		t.Errorf("delete all dead: %v, %s %s", err, f.paths[1], f.bodies[1])
	}

	// An error half-way keeps the count so far.
	_, c = newBulkFake(t, `{"changed":7,"more":true}`, `{"error":{"code":"unavailable","message":"redis is down"}}`)
	var ae *client.APIError
	if n, err := c.CancelTasks(ctx, client.Selection{All: true}); n != 7 || !errors.As(err, &ae) || ae.Status != 503 || ae.Message != "redis is down" {
		t.Errorf("error half-way: %d, %v", n, err)
	}
}

// TestTasksIteratorGuards: the listing's query carries every option; a
// daemon answering the cursor it was sent ends the walk with an error
// instead of looping.
func TestTasksIteratorGuards(t *testing.T) {
	f, c := newBulkFake(t, `{"tasks":[{"id":"a","type":"t","state":"dead","due_at":"2030-01-01T00:00:00Z","died_at":"2030-01-02T00:00:00Z"}],"next_cursor":"same"}`)
	o := client.ListOptions{State: client.StateDead, Type: "t&x", DueAfter: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		DueBefore: time.Date(2031, 1, 1, 0, 0, 0, 500, time.UTC), Limit: 10, Cursor: "same"}
	var got []string
	var last error
	for tk, err := range c.Tasks(t.Context(), o) {
		if err != nil {
			last = err
			break
		}
		got = append(got, tk.ID)
		if !tk.DiedAt.Equal(time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("died_at: %v", tk.DiedAt)
		}
	}
	if !slices.Equal(got, []string{"a"}) || last == nil || !strings.Contains(last.Error(), "cursor") || len(f.paths) != 1 {
		t.Errorf("repeated cursor: %v, %v after %d requests", got, last, len(f.paths))
	}
	want := "GET /v1/tasks?cursor=same&due_after=2030-01-01T00%3A00%3A00Z&due_before=2031-01-01T00%3A00%3A00.0000005Z&limit=10&state=dead&type=t%26x"
	if f.paths[0] != want {
		t.Errorf("query:\n got %s\nwant %s", f.paths[0], want)
	}
}
