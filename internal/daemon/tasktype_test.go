package daemon

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// TestTaskTypesThroughTheClient: every type the daemon accepts for a new
// task can be paused, resumed and rate-limited through the Go client but
// those with a "/" inside (accepted for tasks and templates, refused by
// the pause and the limit with a 422 naming the type), and the types whose
// pause and limit routes cannot be reached ("/", ".", "..") are refused at
// every entry point that sets one — a new task, a batch item, a
// schedule's template, a pause, a limit — naming the field, changing
// nothing.
func TestTaskTypesThroughTheClient(t *testing.T) {
	r, e, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)
	rdb := r.Client(t)
	etcd := e.Client(t)
	c := client.New(app.base, client.WithoutScheduleCoalescing(), client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	due := time.Now().Add(time.Hour)
	limit := client.LimitRule{Concurrency: &client.Concurrency{Limit: 2}}

	for _, typ := range []string{"...", ".a", "a.", "%2E", "%2F", "%", "?", "#", "é", ":a"} {
		t.Run("type "+typ, func(t *testing.T) {
			if _, err := c.Schedule(t.Context(), client.Task{ID: "ok" + typ, Type: typ, DueAt: due}); err != nil {
				t.Fatalf("Schedule of type %q: %v", typ, err)
			}
			if s, err := c.PauseType(t.Context(), typ); err != nil || s.Type != typ || !s.Paused || !s.Changed {
				t.Fatalf("PauseType(%q) = %+v, %v", typ, s, err)
			}
			if s, err := c.ResumeType(t.Context(), typ); err != nil || s.Type != typ || s.Paused || !s.Changed {
				t.Fatalf("ResumeType(%q) = %+v, %v", typ, s, err)
			}
			if l, err := c.SetLimit(t.Context(), typ, limit); err != nil || l.Type != typ {
				t.Fatalf("SetLimit(%q) = %+v, %v", typ, l, err)
			}
			if l, err := c.GetLimit(t.Context(), typ); err != nil || l.Type != typ || l.Rule.Concurrency == nil {
				t.Fatalf("GetLimit(%q) = %+v, %v", typ, l, err)
			}
			if err := c.DeleteLimit(t.Context(), typ); err != nil {
				t.Fatalf("DeleteLimit(%q): %v", typ, err)
			}
		})
	}

	wantRefusal := func(t *testing.T, what, typ string, err error, code, field string) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != code ||
			!strings.HasPrefix(ae.Message, field+": ") || !strings.Contains(ae.Message, "must not") {
			t.Fatalf("%s of type %q: got %v, want 422 %s naming %s", what, typ, err, code, field)
		}
	}
	for _, typ := range []string{"email/send", "a/", "/a", "a/.."} {
		t.Run("slash inside "+typ, func(t *testing.T) {
			if _, err := c.Schedule(t.Context(), client.Task{ID: "slash" + typ, Type: typ, DueAt: due}); err != nil {
				t.Fatalf("Schedule of type %q: %v", typ, err)
			}
			if _, err := c.PutSchedule(t.Context(), "slash", client.ScheduleSpec{Cron: "@daily", Task: client.ScheduleTask{Type: typ}}); err != nil {
				t.Fatalf("PutSchedule with task.type %q: %v", typ, err)
			}
			if err := c.DeleteSchedule(t.Context(), "slash"); err != nil {
				t.Fatal(err)
			}
			_, perr := c.PauseType(t.Context(), typ)
			wantRefusal(t, "PauseType", typ, perr, "invalid_task", "type")
			_, lerr := c.SetLimit(t.Context(), typ, limit)
			wantRefusal(t, "SetLimit", typ, lerr, "invalid_rule", "type")
		})
	}

	refused := []string{"/", ".", ".."}
	before := keyCount(t, rdb, cfg.Namespace)
	for _, typ := range refused {
		t.Run("refused "+typ, func(t *testing.T) {
			_, err := c.Schedule(t.Context(), client.Task{ID: "no" + typ, Type: typ, DueAt: due})
			wantRefusal(t, "Schedule", typ, err, "invalid_task", "type")
			rp := app.do(http.MethodPost, "/v1/tasks", `{"type":"`+typ+`","delay":"1h"}`)
			if rp.Status != http.StatusUnprocessableEntity || rp.errCode() != "invalid_task" || !strings.HasPrefix(rp.errMessage(), "type: must not") {
				t.Fatalf("POST /v1/tasks type %q: %d %s", typ, rp.Status, rp.Raw)
			}
			res, err := c.ScheduleBatch(t.Context(), []client.Task{{ID: "batch-no" + typ, Type: typ, DueAt: due}})
			if err != nil {
				t.Fatalf("ScheduleBatch: %v", err)
			}
			wantRefusal(t, "a batch item", typ, res[0].Err, "invalid_task", "type")
			_, err = c.PutSchedule(t.Context(), "sched-no", client.ScheduleSpec{Cron: "@daily", Task: client.ScheduleTask{Type: typ}})
			wantRefusal(t, "PutSchedule", typ, err, "invalid_schedule", "task.type")
			_, perr := c.PauseType(t.Context(), typ)
			_, lerr := c.SetLimit(t.Context(), typ, limit)
			if typ == "/" {
				// no route: the mux takes a whole segment unescaping to
				// "/" for a trailing slash (as for the task id "/")
				var ae *client.APIError
				for _, err := range []error{perr, lerr} {
					if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
						t.Fatalf(`pause or limit of "/": %v, want 404`, err)
					}
				}
				return
			}
			wantRefusal(t, "PauseType", typ, perr, "invalid_task", "type")
			wantRefusal(t, "SetLimit", typ, lerr, "invalid_rule", "type")
		})
	}
	if after := keyCount(t, rdb, cfg.Namespace); after != before {
		t.Fatalf("refused schedules changed the store: %d keys, then %d", before, after)
	}
	resp, err := etcd.Get(t.Context(), "/"+cfg.Namespace+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if strings.Contains(k, "/paused/") || strings.Contains(k, "/limits/") || strings.Contains(k, "/schedules/") {
			t.Fatalf("a refused call left %s in etcd", k)
		}
	}
}

// TestStoredUnaddressableTypes: tasks, pauses and rate-limit rules stored
// with the types the daemon now refuses (before it did) keep working:
// such tasks are listed and cancelled by their type, and the Go client
// reaches the pause and limit of "." and ".." escaped.
func TestStoredUnaddressableTypes(t *testing.T) {
	r, e, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	etcd := e.Client(t)
	c := client.New(app.base, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	types := []string{"/", ".", "..", "a/b"}
	var subs []redisstore.Submit
	for i, typ := range types {
		subs = append(subs, redisstore.Submit{Task: &task.Task{ID: "stored-" + string(rune('a'+i)), Type: typ, DueAt: due}})
	}
	if _, err := st.Schedule(t.Context(), subs); err != nil {
		t.Fatalf("store: %v", err)
	}
	for i, typ := range types {
		id := subs[i].Task.ID
		page, err := c.ListTasks(t.Context(), client.ListOptions{Type: typ})
		if err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != id || page.Tasks[0].Type != typ {
			t.Fatalf("ListTasks of type %q = %+v, %v", typ, page, err)
		}
		if n, err := c.CancelTasks(t.Context(), client.Selection{Type: typ}); err != nil || n != 1 {
			t.Fatalf("CancelTasks of type %q = %d, %v; want 1", typ, n, err)
		}
		if tk, err := st.Get(t.Context(), id); err != nil || tk.State != task.StateCancelled {
			t.Fatalf("%q after cancel: %+v, %v", id, tk, err)
		}
	}

	for _, typ := range []string{".", ".."} {
		if _, err := etcd.Put(t.Context(), pause.Key(cfg.Namespace, typ), `{"paused_at":"2026-01-02T03:04:05Z"}`); err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Put(t.Context(), "/"+cfg.Namespace+"/limits/"+typ, `{"concurrency":{"limit":1,"slot_ttl":"1m0s"}}`); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := c.Types(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]client.TypeInfo{}
	for _, ti := range listed {
		seen[ti.Type] = ti
	}
	for _, typ := range []string{".", ".."} {
		if ti := seen[typ]; !ti.Paused || ti.Limit == nil {
			t.Fatalf("Types: %q is %+v; want its stored pause and limit", typ, ti)
		}
		if l, err := c.GetLimit(t.Context(), typ); err != nil || l.Type != typ || l.Rule.Concurrency == nil {
			t.Fatalf("GetLimit(%q) = %+v, %v", typ, l, err)
		}
		if err := c.DeleteLimit(t.Context(), typ); err != nil {
			t.Fatalf("DeleteLimit(%q): %v", typ, err)
		}
		if s, err := c.ResumeType(t.Context(), typ); err != nil || s.Type != typ || s.Paused || !s.Changed {
			t.Fatalf("ResumeType(%q) = %+v, %v", typ, s, err)
		}
	}
	if paused, err := pause.List(t.Context(), etcd, cfg.Namespace); err != nil || len(paused) != 0 {
		t.Fatalf("pauses after the resumes: %v, %v", paused, err)
	}
	if resp, err := etcd.Get(t.Context(), "/"+cfg.Namespace+"/limits/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("limits after the deletes: %v, %v", resp, err)
	}
}
