package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// TestAPI walks every endpoint and status code of the API on a real Redis,
// one step after the other (the steps build on each other's state). Leader
// and worker transitions (Take, Ack, Finish) are made with the store
// directly, as the event and work binaries would.
func TestAPI(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)

	future := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond).UTC()
	futureS := future.Format("2006-01-02T15:04:05.000Z07:00")
	var token int64
	// take claims every due task of id's shard (as a shard leader would)
	// and returns the take that holds id.
	take := func(t *testing.T, id string) redisstore.Taken {
		t.Helper()
		token++
		var got *task.Task
		var tk redisstore.Taken
		var err error
		deadline := time.Now().Add(5 * time.Second)
		for got == nil && time.Now().Before(deadline) {
			tk, err = st.Take(t.Context(), st.Shard(id), token, 100, time.Minute)
			if err != nil {
				t.Fatalf("take: %v", err)
			}
			for _, x := range tk.Tasks {
				if x.ID == id {
					got = x
				}
			}
		}
		if got == nil {
			t.Fatalf("take: %s was not taken", id)
		}
		return tk
	}

	type step struct {
		name, method, path, body string
		status                   int
		code                     string                  // error code, for error answers
		check                    func(*testing.T, reply) // extra checks
		before                   func(*testing.T)        // state set-up
	}
	field := func(k, want string) func(*testing.T, reply) {
		return func(t *testing.T, rp reply) {
			t.Helper()
			if got := rp.str(k); got != want {
				t.Fatalf("%s = %q, want %q (%s)", k, got, want, rp.Raw)
			}
		}
	}
	all := func(fs ...func(*testing.T, reply)) func(*testing.T, reply) {
		return func(t *testing.T, rp reply) {
			t.Helper()
			for _, f := range fs {
				f(t, rp)
			}
		}
	}
	contains := func(sub string) func(*testing.T, reply) {
		return func(t *testing.T, rp reply) {
			t.Helper()
			if !strings.Contains(string(rp.Raw), sub) {
				t.Fatalf("answer lacks %s: %s", sub, rp.Raw)
			}
		}
	}
	var fired redisstore.Taken
	steps := []step{
		{name: "create", method: "POST", path: "/v1/tasks",
			body:   `{"id":"t1","type":"order.cancel","payload":{"order":  1},"delay":"1h","headers":{"trace":"x"},"max_attempts":3,"timeout":"1.5s","priority":5,"topic":"orders","key":"k1"}`,
			status: 201, check: all(field("outcome", "created"), field("state", "scheduled"), func(t *testing.T, rp reply) {
				if sh := int(rp.JSON["shard"].(float64)); sh != st.Shard("t1") {
					t.Fatalf("shard %d, want %d", sh, st.Shard("t1"))
				}
			})},
		{name: "identical re-submit", method: "POST", path: "/v1/tasks",
			body:   `{"id":"t1","type":"order.cancel","payload":{"order":  1},"delay":"1h","headers":{"trace":"x"},"max_attempts":3,"timeout":"1.5s","priority":5,"topic":"orders","key":"k1"}`,
			status: 200, check: field("outcome", "unchanged")},
		{name: "upsert with other payload", method: "POST", path: "/v1/tasks",
			body:   `{"id":"t1","type":"order.cancel","payload":{"order":  2},"due_at":"` + futureS + `"}`,
			status: 200, check: all(field("outcome", "updated"), field("due_at", futureS))},
		{name: "get keeps payload verbatim", method: "GET", path: "/v1/tasks/t1", status: 200,
			check: all(field("state", "scheduled"), field("type", "order.cancel"), field("due_at", futureS),
				contains(`"payload":{"order":  2}`), contains(`"attempt":1`), contains(`"max_attempts":10`))},
		{name: "binary payload", method: "POST", path: "/v1/tasks",
			body: `{"id":"b1","type":"blob","payload_base64":"AAEC/w==","delay":"1h"}`, status: 201},
		{name: "get binary payload", method: "GET", path: "/v1/tasks/b1", status: 200,
			check: all(field("payload_base64", "AAEC/w=="), func(t *testing.T, rp reply) {
				if _, ok := rp.JSON["payload"]; ok {
					t.Fatalf("binary payload shown as JSON: %s", rp.Raw)
				}
			})},
		{name: "generated id is a UUIDv7", method: "POST", path: "/v1/tasks",
			body: `{"type":"x","delay":"1h"}`, status: 201, check: func(t *testing.T, rp reply) {
				u, err := uuid.Parse(rp.str("id"))
				if err != nil || u.Version() != 7 {
					t.Fatalf("id %q is not a UUIDv7 (%v)", rp.str("id"), err)
				}
			}},
		{name: "get unknown", method: "GET", path: "/v1/tasks/nope", status: 404, code: "not_found"},
		{name: "get invalid id", method: "GET", path: "/v1/tasks/" + strings.Repeat("x", 201), status: 422, code: "invalid_task"},
		{name: "reschedule by delay", method: "PATCH", path: "/v1/tasks/t1", body: `{"delay":"2h"}`, status: 200,
			check: func(t *testing.T, rp reply) {
				at, err := time.Parse(time.RFC3339, rp.str("due_at"))
				if err != nil || at.Before(time.Now().Add(119*time.Minute)) || at.After(time.Now().Add(121*time.Minute)) {
					t.Fatalf("due_at %q not about 2h from now (%v)", rp.str("due_at"), err)
				}
			}},
		{name: "reschedule by due_at", method: "PATCH", path: "/v1/tasks/t1", body: `{"due_at":"` + futureS + `"}`,
			status: 200, check: field("due_at", futureS)},
		{name: "reschedule needs a due", method: "PATCH", path: "/v1/tasks/t1", body: `{}`, status: 422, code: "invalid_task"},
		{name: "reschedule unknown", method: "PATCH", path: "/v1/tasks/nope", body: `{"delay":"1s"}`, status: 404, code: "not_found"},
		{name: "cancel unknown", method: "DELETE", path: "/v1/tasks/nope", status: 404, code: "not_found"},
		{name: "cancel", method: "DELETE", path: "/v1/tasks/t1", status: 200, check: field("state", "cancelled")},
		{name: "cancelled stays readable", method: "GET", path: "/v1/tasks/t1", status: 200, check: field("state", "cancelled")},
		{name: "cancel again", method: "DELETE", path: "/v1/tasks/t1", status: 409, code: "conflict", check: contains("cancelled")},
		{name: "reschedule cancelled", method: "PATCH", path: "/v1/tasks/t1", body: `{"delay":"1s"}`, status: 409, code: "conflict", check: contains("cancelled")},
		{name: "re-submit cancelled with other content", method: "POST", path: "/v1/tasks",
			body: `{"id":"t1","type":"order.cancel","payload":{"order":3}}`, status: 409, code: "conflict", check: contains("cancelled")},
		{name: "create due now", method: "POST", path: "/v1/tasks", body: `{"id":"f1","type":"x","payload":"p"}`, status: 201},
		{name: "taken, not settled: reschedule", method: "PATCH", path: "/v1/tasks/f1", body: `{"delay":"1h"}`, status: 409, code: "conflict",
			before: func(t *testing.T) { fired = take(t, "f1") }, check: contains("fired")},
		{name: "taken, not settled: cancel", method: "DELETE", path: "/v1/tasks/f1", status: 409, code: "conflict", check: contains("fired")},
		{name: "taken, not settled: get", method: "GET", path: "/v1/tasks/f1", status: 200, check: field("state", "fired")},
		{name: "fired: reschedule", method: "PATCH", path: "/v1/tasks/f1", body: `{"delay":"1h"}`, status: 409, code: "conflict",
			before: func(t *testing.T) {
				if n, _, err := st.Settle(t.Context(), st.Shard("f1"), token, fired.Lease, nil); err != nil || n < 1 {
					t.Fatalf("settle: %d %v", n, err)
				}
			}, check: contains("fired")},
		{name: "fired: cancel", method: "DELETE", path: "/v1/tasks/f1", status: 409, code: "conflict", check: contains("fired")},
		{name: "fired: identical re-submit", method: "POST", path: "/v1/tasks", body: `{"id":"f1","type":"x","payload":"p"}`,
			status: 200, check: all(field("outcome", "unchanged"), field("state", "fired"))},
		{name: "dead list", method: "GET", path: "/v1/dead?limit=10", status: 200,
			before: func(t *testing.T) {
				app.do("POST", "/v1/tasks", `{"id":"d1","type":"x"}`)
				app.do("POST", "/v1/tasks", `{"id":"d2","type":"x"}`)
				for _, id := range []string{"d1", "d2"} {
					var gen uint64
					tk := take(t, id)
					for _, f := range tk.Fired() {
						if f.ID == id {
							gen = f.Gen
						}
					}
					if _, _, err := st.Settle(t.Context(), st.Shard(id), token, tk.Lease, nil); err != nil {
						t.Fatal(err)
					}
					if s, err := st.Finish(t.Context(), redisstore.Finish{ID: id, Gen: gen, Kind: redisstore.Dead, Error: "boom"}); err != nil || s != task.StateDead {
						t.Fatalf("finish dead: %s %v", s, err)
					}
				}
			},
			check: all(contains(`"id":"d1"`), contains(`"id":"d2"`), contains(`"last_error":"boom"`), contains(`"died_at":`), contains(`"state":"dead"`))},
		{name: "dead list bad limit", method: "GET", path: "/v1/dead?limit=0", status: 422, code: "invalid_task"},
		{name: "dead list limit not a number", method: "GET", path: "/v1/dead?limit=x", status: 422, code: "invalid_task"},
		{name: "redrive", method: "POST", path: "/v1/dead/d1/redrive", status: 200, check: field("state", "scheduled")},
		{name: "redriven is scheduled", method: "GET", path: "/v1/tasks/d1", status: 200, check: all(field("state", "scheduled"), contains(`"attempt":1`))},
		{name: "redrive not dead", method: "POST", path: "/v1/dead/d1/redrive", status: 409, code: "conflict", check: contains("scheduled")},
		{name: "redrive unknown", method: "POST", path: "/v1/dead/nope/redrive", status: 404, code: "not_found"},
		{name: "delete dead", method: "DELETE", path: "/v1/dead/d2", status: 200, check: contains(`"deleted":true`)},
		{name: "delete dead again", method: "DELETE", path: "/v1/dead/d2", status: 404, code: "not_found"},
		{name: "deleted dead is gone", method: "GET", path: "/v1/tasks/d2", status: 404, code: "not_found"},
		{name: "delete dead of a scheduled task", method: "DELETE", path: "/v1/dead/b1", status: 409, code: "conflict"},
		{name: "stats", method: "GET", path: "/v1/stats", status: 200, check: func(t *testing.T, rp reply) {
			s := app.stats()
			if !s.RedisUp || s.JournalDepth != 0 || len(s.Shards) != cfg.Shards || s.ShardCount != cfg.Shards {
				t.Fatalf("stats: %s", rp.Raw)
			}
			// b1, the generated one and the redriven d1 wait; f1 was fired.
			if s.Totals.Scheduled != 3 || s.Totals.Firing != 0 || s.Totals.Dead != 0 {
				t.Fatalf("totals %+v: %s", s.Totals, rp.Raw)
			}
		}},
		{name: "unknown endpoint", method: "GET", path: "/v1/nothing", status: 404, code: "not_found"},
		{name: "wrong method", method: "PUT", path: "/v1/tasks/t1", body: `{}`, status: 404, code: "not_found"},
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "metrics", method: "GET", path: "/metrics", status: 200, check: all(
			contains(`delayq_http_requests_total{code="201",route="POST /v1/tasks"}`),
			contains(`delayq_http_request_duration_seconds_bucket{route="GET /v1/tasks/{id}"`),
			contains(`delayq_tasks_scheduled_total{outcome="created"}`),
			contains(`delayq_tasks_scheduled_total{outcome="rejected"} 1`),
			contains(`delayq_journal_depth 0`), contains(`delayq_redis_up 1`),
			contains(`delayq_journal_replayed_total 0`), contains(`delayq_redis_errors_total`))},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) {
			if s.before != nil {
				s.before(t)
			}
			rp := app.do(s.method, s.path, s.body)
			if rp.Status != s.status {
				t.Fatalf("%s %s: status %d, want %d: %s", s.method, s.path, rp.Status, s.status, rp.Raw)
			}
			if s.code != "" && rp.errCode() != s.code {
				t.Fatalf("code %q, want %q: %s", rp.errCode(), s.code, rp.Raw)
			}
			if s.status >= 400 && rp.errMessage() == "" {
				t.Fatalf("error answer without message: %s", rp.Raw)
			}
			if s.check != nil {
				s.check(t, rp)
			}
		}) {
			t.FailNow() // later steps depend on this one
		}
	}
}
