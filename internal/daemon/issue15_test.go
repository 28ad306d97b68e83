package daemon

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// TestInvalidUTF8IDsDoNotCollide: "adv-col-\xff" and "adv-col-\xfe"
// were both repaired to "adv-col-\ufffd", so the second submission
// overwrote the first (outcome updated). Both are 422 naming the field
// and nothing is stored; a payload string that is not valid UTF-8 too.
func TestInvalidUTF8IDsDoNotCollide(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	for _, body := range []string{
		"{\"id\":\"adv-col-\xff\",\"type\":\"a\",\"delay\":\"1h\"}",
		"{\"id\":\"adv-col-\xfe\",\"type\":\"b\",\"delay\":\"1h\"}",
		`{"id":"adv-col-\udfff","type":"b","delay":"1h"}`,
		"{\"id\":\"adv-col-ok\",\"type\":\"b\",\"payload\":{\"s\":\"\xff\"},\"delay\":\"1h\"}",
		"{\"id\":\"adv-col-ok\",\"type\":\"b\",\"headers\":{\"h\":\"\xc0\"},\"delay\":\"1h\"}",
	} {
		rp := app.do("POST", "/v1/tasks", body)
		if rp.Status != 422 || rp.errCode() != wire.CodeInvalidTask || !strings.Contains(rp.errMessage(), "not valid UTF-8") {
			t.Errorf("%q: %d %s", body, rp.Status, rp.Raw)
		}
	}
	rp := app.do("POST", "/v1/tasks/batch", "{\"tasks\":[{\"id\":\"adv-col-\xff\",\"type\":\"a\"},{\"id\":\"fine\",\"type\":\"a\",\"delay\":\"1h\"}]}")
	if rp.Status != 200 || !strings.Contains(string(rp.Raw), `"id: not valid UTF-8`) || !strings.Contains(string(rp.Raw), `"outcome":"created"`) {
		t.Errorf("batch: %d %s", rp.Status, rp.Raw)
	}
	for _, id := range []string{"adv-col-\ufffd", "adv-col-ok"} {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.Status != 404 {
			t.Errorf("GET %q: %d %s (nothing may be stored)", id, g.Status, g.Raw)
		}
	}
}

// TestLatestDueRoundTrip: the latest accepted due time (task.MaxDueAt,
// 2^43-1 ms) is stored and read back exactly, and its due-set score
// names the record's bucket for every bucket, as a take reads it (the
// score is due ms + bucket/1024); one millisecond later is refused with
// 422 stating the latest time, for POST and PATCH. Before, due_at in 2300
// or 9999 was 201 and would have been looked up in the wrong bucket.
func TestLatestDueRoundTrip(t *testing.T) {
	// The bound is tight: past 2^43 ms a double cannot hold bucket/1024.
	if s := float64(1<<43) + 1023.0/1024; math.Round((s-math.Floor(s))*1024) == 1023 {
		t.Fatal("2^43 + 1023/1024 is exact; the bound could be wider")
	}
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	rdb := r.Client(t)
	buckets := map[int]bool{}
	for i := range 300 {
		id := "edge-" + strconv.Itoa(i)
		rp := app.do("POST", "/v1/tasks", `{"id":"`+id+`","type":"x","due_at":"`+task.MaxDueText+`"}`)
		if rp.Status != 201 || rp.str("due_at") != task.MaxDueText {
			t.Fatalf("schedule at the latest time: %d %s", rp.Status, rp.Raw)
		}
		g := app.do("GET", "/v1/tasks/"+id, "")
		if g.Status != 200 || g.str("due_at") != task.MaxDueText || g.str("state") != "scheduled" {
			t.Fatalf("read back: %d %s", g.Status, g.Raw)
		}
		prefix := "dq:{" + cfg.Namespace + ":" + strconv.Itoa(redisstore.ShardOf(id, cfg.Shards)) + "}:"
		score, err := rdb.ZScore(t.Context(), prefix+"due", id).Result()
		if err != nil {
			t.Fatal(err)
		}
		due := math.Floor(score)
		b := int(math.Floor((score-due)*1024 + 0.5))
		if int64(due) != task.MaxDueMillis {
			t.Fatalf("%s: score %f floors to %d", id, score, int64(due))
		}
		if ok, err := rdb.HExists(t.Context(), prefix+"t:"+strconv.Itoa(b), id).Result(); err != nil || !ok {
			t.Fatalf("%s: score %f names bucket %d, which does not hold the record (%v)", id, score, b, err)
		}
		buckets[b] = true
	}
	if len(buckets) < 200 {
		t.Fatalf("only %d buckets covered", len(buckets))
	}
	late := task.MaxDueAt.Add(time.Millisecond).Format(wire.TimeLayout)
	for _, body := range []string{`{"type":"x","due_at":"` + late + `"}`, `{"type":"x","due_at":"2300-01-01T00:00:00Z"}`, `{"type":"x","due_at":"9999-01-01T00:00:00Z"}`} {
		if rp := app.do("POST", "/v1/tasks", body); rp.Status != 422 || !strings.Contains(rp.errMessage(), task.MaxDueText) {
			t.Errorf("%s: %d %s", body, rp.Status, rp.Raw)
		}
	}
	if rp := app.do("PATCH", "/v1/tasks/edge-0", `{"due_at":"`+late+`"}`); rp.Status != 422 || !strings.Contains(rp.errMessage(), task.MaxDueText) {
		t.Errorf("PATCH one ms late: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("PATCH", "/v1/tasks/edge-0", `{"due_at":"2030-01-01T00:00:00Z"}`); rp.Status != 200 {
		t.Errorf("PATCH back: %d %s", rp.Status, rp.Raw)
	}
	if rp := app.do("PATCH", "/v1/tasks/edge-0", `{"due_at":"`+task.MaxDueText+`"}`); rp.Status != 200 || rp.str("due_at") != task.MaxDueText {
		t.Errorf("PATCH to the latest time: %d %s", rp.Status, rp.Raw)
	}
}

// TestRecordTooLarge: a task whose Kafka record (key, payload, headers
// and framing, record.Size) would exceed DQ_MAX_RECORD_BYTES is 413
// record_too_large with the size and the limit; one byte less is taken.
// A batch answers it per task.
func TestRecordTooLarge(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.MaxBody = 4 << 20
	if cfg.MaxRecordBytes != 1_000_000 {
		t.Fatalf("default DQ_MAX_RECORD_BYTES %d", cfg.MaxRecordBytes)
	}
	app := startApp(t, cfg)
	hdrs := map[string]string{"trace": strings.Repeat("t", 100)}
	frame := record.Size(&task.Task{ID: "big1", Type: "x", Headers: hdrs, DueAt: time.Now()})
	body := func(id string, n int) string {
		h, _ := json.Marshal(hdrs)
		return `{"id":"` + id + `","type":"x","delay":"1h","headers":` + string(h) +
			`,"payload_base64":"` + base64.StdEncoding.EncodeToString(make([]byte, n)) + `"}`
	}
	fit := int(cfg.MaxRecordBytes) - frame
	if rp := app.do("POST", "/v1/tasks", body("big1", fit)); rp.Status != 201 {
		t.Fatalf("payload of %d (record exactly at the limit): %d %.300s", fit, rp.Status, rp.Raw)
	}
	rp := app.do("POST", "/v1/tasks", body("big2", fit+1))
	if rp.Status != 413 || rp.errCode() != wire.CodeRecordTooLarge ||
		!strings.Contains(rp.errMessage(), "1000001 bytes") || !strings.Contains(rp.errMessage(), "1000000 bytes (DQ_MAX_RECORD_BYTES)") {
		t.Fatalf("payload of %d: %d %.300s", fit+1, rp.Status, rp.Raw)
	}
	// Headers count: the same payload fits without them.
	if rp := app.do("POST", "/v1/tasks", `{"id":"big3","type":"x","delay":"1h","payload_base64":"`+base64.StdEncoding.EncodeToString(make([]byte, fit+1))+`"}`); rp.Status != 201 {
		t.Fatalf("without headers: %d %.300s", rp.Status, rp.Raw)
	}
	rp = app.do("POST", "/v1/tasks/batch", `{"tasks":[`+body("bat1", fit+1)+`,`+body("bat2", 10)+`]}`)
	var res struct {
		Results []struct {
			ID      string
			Outcome string
			Error   *wire.Error
		}
	}
	if err := json.Unmarshal(rp.Raw, &res); err != nil || rp.Status != 200 || len(res.Results) != 2 ||
		res.Results[0].Error == nil || res.Results[0].Error.Code != wire.CodeRecordTooLarge || res.Results[1].Outcome != "created" {
		t.Fatalf("batch: %d %.400s", rp.Status, rp.Raw)
	}
	if g := app.do("GET", "/v1/tasks/big2", ""); g.Status != 404 {
		t.Fatalf("refused task stored: %d", g.Status)
	}
}

// TestRedisFullIsJournaled: Redis at maxmemory (noeviction) refuses the
// schedule script with OOM. That answered 500 internal with the script's
// SHA and Lua line; now the task is journaled (202), /readyz and
// delayq_redis_writable say why, and once Redis has memory again the
// journal is replayed and the task is readable. No answer carries Redis
// internals.
func TestRedisFullIsJournaled(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	rdb := r.Client(t)
	if rp := app.do("POST", "/v1/tasks", `{"id":"warm","type":"x","delay":"1h"}`); rp.Status != 201 {
		t.Fatalf("warm-up: %d %s", rp.Status, rp.Raw)
	}
	if err := rdb.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.ConfigSet(t.Context(), "maxmemory", "0").Err() })
	internals := func(what string, raw []byte) {
		t.Helper()
		for _, s := range []string{"@user_script", "f_", "script", "OOM command", "maxmemory'"} {
			if strings.Contains(string(raw), s) {
				t.Errorf("%s carries Redis internals (%q): %s", what, s, raw)
			}
		}
	}
	rp := app.do("POST", "/v1/tasks", `{"id":"full-1","type":"x","payload":{"v":1},"delay":"1h"}`)
	internals("schedule", rp.Raw)
	if rp.Status != 202 || rp.str("state") != "journaled" {
		t.Fatalf("schedule while Redis is full: %d %s", rp.Status, rp.Raw)
	}
	rp = app.do("POST", "/v1/tasks/batch", `{"tasks":[{"id":"full-2","type":"x","delay":"1h"}]}`)
	internals("batch", rp.Raw)
	if rp.Status != 200 || !strings.Contains(string(rp.Raw), `"outcome":"journaled"`) {
		t.Fatalf("batch while Redis is full: %d %s", rp.Status, rp.Raw)
	}
	// Redis answers reads meanwhile; the refused write is visible.
	var ready admin.ReadyBody
	g := app.do("GET", "/readyz", "")
	if err := json.Unmarshal(g.Raw, &ready); err != nil || g.Status != 200 ||
		!strings.Contains(strings.Join(ready.Checks, "\n"), "redis: degraded: refusing writes: out of memory") {
		t.Fatalf("readyz while Redis is full: %d %s", g.Status, g.Raw)
	}
	if m := app.do("GET", "/metrics", ""); !strings.Contains(string(m.Raw), "delayq_redis_writable 0") ||
		!strings.Contains(string(m.Raw), `delayq_redis_write_refusals_total{reason="oom"}`) {
		t.Fatalf("metrics while Redis is full: %s", grepLines(string(m.Raw), "delayq_redis"))
	}
	if s := app.stats(); s.JournalDepth != 2 {
		t.Fatalf("journal depth %d, want 2", s.JournalDepth)
	}
	for _, q := range []struct{ method, path, body string }{
		{"PATCH", "/v1/tasks/warm", `{"delay":"2h"}`},
		{"DELETE", "/v1/tasks/warm", ""},
		{"GET", "/v1/stats", ""},
	} {
		internals(q.method+" "+q.path, app.do(q.method, q.path, q.body).Raw)
	}

	if err := rdb.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "journal replayed", func() bool { return app.JournalDepth() == 0 })
	for _, id := range []string{"full-1", "full-2"} {
		if g := app.do("GET", "/v1/tasks/"+id, ""); g.Status != 200 || g.str("state") != "scheduled" {
			t.Fatalf("GET %s after the replay: %d %s", id, g.Status, g.Raw)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "writable again", func() bool {
		g := app.do("GET", "/readyz", "")
		return g.Status == 200 && strings.Contains(string(g.Raw), `"redis: ok"`)
	})
}

// TestReadyzTellsTheTruth: /readyz was 200 whenever the journal was open,
// even when the daemon could accept nothing. Redis stopped alone: 200,
// the Redis line says degraded, the journal line ok. Redis stopped and the
// journal failing writes: 503 with both reasons.
func TestReadyzTellsTheTruth(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	if code, b := app.readyz(); code != 200 || len(b.Checks) != 2 || b.Checks[0] != "redis: ok" || !strings.HasPrefix(b.Checks[1], "journal: ok") || b.Reason != "" {
		t.Fatalf("all well: %d %+v", code, b)
	}
	r.Stop(t)
	testenv.WaitFor(t, 10*time.Second, "redis seen down", func() bool { return !app.core.redisUp.Load() })
	code, b := app.readyz()
	if code != 200 || b.Status != "ready" || !strings.HasPrefix(b.Checks[0], "redis: degraded: unreachable") ||
		!strings.HasPrefix(b.Checks[1], "journal: ok") || !strings.HasPrefix(b.Reason, "redis: degraded") {
		t.Fatalf("redis down, journal fine: %d %+v", code, b)
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"j","type":"x"}`); rp.Status != 202 {
		t.Fatalf("schedule with redis down: %d %s", rp.Status, rp.Raw)
	}
	// The journal stops taking writes (as on a failed disk).
	if err := app.core.jr.Close(); err != nil {
		t.Fatal(err)
	}
	code, b = app.readyz()
	if code != 503 || b.Status != "not ready" || !strings.Contains(b.Reason, "redis: degraded: unreachable") ||
		!strings.Contains(b.Reason, "journal: failing: cannot write") {
		t.Fatalf("redis down, journal failing: %d %+v", code, b)
	}
	if rp := app.do("POST", "/v1/tasks", `{"id":"k","type":"x"}`); rp.Status != 503 {
		t.Fatalf("schedule with nowhere to write: %d %s", rp.Status, rp.Raw)
	}
}

// TestStartWithRedisFull: a daemon that starts while Redis refuses
// writes (OOM) journals schedules, says why in /readyz, and replays them
// once Redis takes writes.
func TestStartWithRedisFull(t *testing.T) {
	r := startRedis(t)
	rdb := r.Client(t)
	if err := rdb.ConfigSet(t.Context(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.ConfigSet(t.Context(), "maxmemory", "0").Err() })
	cfg := testConfig(t, r.Addr)
	app := startApp(t, cfg)
	if rp := app.do("POST", "/v1/tasks", `{"id":"early","type":"x","delay":"1h"}`); rp.Status != 202 || rp.str("state") != "journaled" {
		t.Fatalf("schedule: %d %s", rp.Status, rp.Raw)
	}
	g := app.do("GET", "/readyz", "")
	if g.Status != 200 || !strings.Contains(string(g.Raw), "redis: degraded: store not open: refusing writes: out of memory") {
		t.Fatalf("readyz: %d %s", g.Status, g.Raw)
	}
	if err := rdb.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "journal replayed", func() bool { return app.JournalDepth() == 0 })
	if g := app.do("GET", "/v1/tasks/early", ""); g.Status != 200 || g.str("state") != "scheduled" {
		t.Fatalf("GET after the replay: %d %s", g.Status, g.Raw)
	}
	if g := app.do("GET", "/readyz", ""); g.Status != 200 || !strings.Contains(string(g.Raw), `"redis: ok"`) {
		t.Fatalf("readyz after: %d %s", g.Status, g.Raw)
	}
}
