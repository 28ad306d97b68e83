package daemon

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestHostileInput sends bad requests of every kind and checks each gets
// its documented 4xx and code — and that, after the whole table, Redis
// (shard stats, key count, the one existing task) and the journal are
// exactly as before.
func TestHostileInput(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.APIToken = "s3cret-token"
	cfg.MaxBody = 64 << 10
	cfg.MaxBatch = 10
	app := startApp(t, cfg)
	st := openStore(t, r.Client(t), cfg)
	rdb := r.Client(t)

	if rp := app.do("POST", "/v1/tasks", `{"id":"keep","type":"x","payload":{"a":1},"delay":"1h"}`); rp.Status != 201 {
		t.Fatalf("set-up: %d %s", rp.Status, rp.Raw)
	}
	keepBefore := app.do("GET", "/v1/tasks/keep", "")
	statsBefore, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	keysBefore := keyCount(t, rdb, cfg.Namespace)

	big := `{"type":"x","payload":"` + strings.Repeat("a", 70<<10) + `"}`
	batch := func(n int) string {
		return `{"tasks":[` + strings.TrimSuffix(strings.Repeat(`{"type":"x"},`, n), ",") + `]}`
	}
	const good = "Bearer s3cret-token"
	type tc struct {
		name, method, path, body string
		contentType              string // default application/json
		auth                     string // default the good token; "-" none
		chunked                  bool   // send without Content-Length
		status                   int
		code                     string
		msg                      string // the message must contain this
	}
	cases := []tc{
		{name: "invalid JSON", body: `{"type":`, status: 400, code: "invalid_json"},
		{name: "invalid JSON token", body: `{"type": x}`, status: 400, code: "invalid_json"},
		{name: "empty body", body: ``, status: 400, code: "invalid_json"},
		{name: "not an object", body: `[{"type":"x"}]`, status: 400, code: "invalid_json"},
		{name: "a string", body: `"x"`, status: 400, code: "invalid_json"},
		{name: "trailing data", body: `{"type":"x"} {"type":"y"}`, status: 400, code: "invalid_json"},
		{name: "unknown field", body: `{"type":"x","dely":"1h"}`, status: 400, code: "unknown_field", msg: "dely"},
		{name: "field name in another case", body: `{"Type":"x"}`, status: 400, code: "unknown_field", msg: `"Type"`},
		{name: "duplicate field", body: `{"type":"x","type":"y"}`, status: 400, code: "invalid_json", msg: "duplicate"},
		{name: "duplicate field, escaped", body: `{"\u0074ype":"x","type":"y"}`, status: 400, code: "invalid_json", msg: "duplicate"},
		{name: "field name escaped", body: `{"\u0074ype":"x","delai":"1s"}`, status: 400, code: "unknown_field", msg: "delai"},
		{name: "missing type", body: `{"id":"a"}`, status: 422, code: "invalid_task", msg: "type:"},
		{name: "null type", body: `{"type":null}`, status: 422, code: "invalid_task", msg: "type:"},
		{name: "type with space", body: `{"type":"a b"}`, status: 422, code: "invalid_task", msg: "type:"},
		{name: "priority of wrong JSON type", body: `{"type":"x","priority":"high"}`, status: 422, code: "invalid_task", msg: "priority"},
		{name: "fractional max_attempts", body: `{"type":"x","max_attempts":1.5}`, status: 422, code: "invalid_task", msg: "max_attempts"},
		{name: "max_attempts too high", body: `{"type":"x","max_attempts":5000}`, status: 422, code: "invalid_task", msg: "max_attempts"},
		{name: "unparsable due_at", body: `{"type":"x","due_at":"tomorrow"}`, status: 422, code: "invalid_task", msg: "due_at"},
		{name: "due_at without zone", body: `{"type":"x","due_at":"2030-01-02T15:04:05"}`, status: 422, code: "invalid_task", msg: "due_at"},
		{name: "due_at year 10000", body: `{"type":"x","due_at":"10000-01-01T00:00:00Z"}`, status: 422, code: "invalid_task", msg: "due_at"},
		{name: "due_at before 1970", body: `{"type":"x","due_at":"1969-12-31T23:59:59Z"}`, status: 422, code: "invalid_task", msg: "due_at"},
		{name: "both due_at and delay", body: `{"type":"x","due_at":"2030-01-02T15:04:05Z","delay":"1h"}`, status: 422, code: "invalid_task", msg: "due_at"},
		{name: "negative delay", body: `{"type":"x","delay":"-5s"}`, status: 422, code: "invalid_task", msg: "delay"},
		{name: "unparsable delay", body: `{"type":"x","delay":"soon"}`, status: 422, code: "invalid_task", msg: "delay"},
		{name: "bad timeout", body: `{"type":"x","timeout":"forever"}`, status: 422, code: "invalid_task", msg: "timeout"},
		{name: "id too long", body: `{"type":"x","id":"` + strings.Repeat("i", 201) + `"}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "id with NUL", body: `{"type":"x","id":"a\u0000b"}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "id with newline", body: `{"type":"x","id":"a\nb"}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "id with DEL", body: `{"type":"x","id":"a\u007fb"}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "id with space", body: `{"type":"x","id":"a b"}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "empty id", body: `{"type":"x","id":""}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "both payloads", body: `{"type":"x","payload":{},"payload_base64":"AA=="}`, status: 422, code: "invalid_task", msg: "payload"},
		{name: "bad base64", body: `{"type":"x","payload_base64":"!!"}`, status: 422, code: "invalid_task", msg: "payload_base64"},
		{name: "reserved header", body: `{"type":"x","headers":{"dq-id":"y"}}`, status: 422, code: "invalid_task", msg: "headers"},
		{name: "header of wrong type", body: `{"type":"x","headers":{"a":1}}`, status: 422, code: "invalid_task", msg: "headers"},
		{name: "bad topic", body: `{"type":"x","topic":"a/b"}`, status: 422, code: "invalid_task", msg: "topic"},
		{name: "payload over the limit", body: big, status: 413, code: "too_large"},
		{name: "payload over the limit, chunked", body: big, chunked: true, status: 413, code: "too_large"},
		{name: "wrong content type", body: `{"type":"x"}`, contentType: "text/plain", status: 415, code: "unsupported_media_type"},
		{name: "no content type", body: `{"type":"x"}`, contentType: "-", status: 415, code: "unsupported_media_type"},
		{name: "form content type", body: `type=x`, contentType: "application/x-www-form-urlencoded", status: 415, code: "unsupported_media_type"},
		{name: "missing token", body: `{"type":"x"}`, auth: "-", status: 401, code: "unauthorized"},
		{name: "bad token", body: `{"type":"x"}`, auth: "Bearer s3cret-tokem", status: 401, code: "unauthorized"},
		{name: "token prefix", body: `{"type":"x"}`, auth: "Bearer s3cret", status: 401, code: "unauthorized"},
		{name: "basic auth", body: `{"type":"x"}`, auth: "Basic czNjcmV0LXRva2Vu", status: 401, code: "unauthorized"},
		{name: "token on reads too", method: "GET", path: "/v1/tasks/keep", auth: "-", status: 401, code: "unauthorized"},
		{name: "token on cancel too", method: "DELETE", path: "/v1/tasks/keep", auth: "-", status: 401, code: "unauthorized"},
		{name: "token on stats too", method: "GET", path: "/v1/stats", auth: "-", status: 401, code: "unauthorized"},
		{name: "batch over the limit", path: "/v1/tasks/batch", body: batch(11), status: 413, code: "batch_too_large"},
		{name: "batch over the body limit", path: "/v1/tasks/batch", body: `{"tasks":[` + big + `]}`, status: 413, code: "too_large"},
		{name: "batch without tasks", path: "/v1/tasks/batch", body: `{}`, status: 422, code: "invalid_task", msg: "tasks"},
		{name: "batch tasks not an array", path: "/v1/tasks/batch", body: `{"tasks":{"type":"x"}}`, status: 422, code: "invalid_task", msg: "tasks"},
		{name: "batch unknown field", path: "/v1/tasks/batch", body: `{"tasks":[],"atomic":true}`, status: 400, code: "unknown_field"},
		{name: "batch invalid JSON", path: "/v1/tasks/batch", body: `{"tasks":[{"type":"x"},]}`, status: 400, code: "invalid_json"},
		{name: "batch wrong content type", path: "/v1/tasks/batch", body: batch(1), contentType: "text/json", status: 415, code: "unsupported_media_type"},
		{name: "batch missing token", path: "/v1/tasks/batch", body: batch(1), auth: "-", status: 401, code: "unauthorized"},
		{name: "reschedule negative delay", method: "PATCH", path: "/v1/tasks/keep", body: `{"delay":"-1s"}`, status: 422, code: "invalid_task", msg: "delay"},
		{name: "reschedule both", method: "PATCH", path: "/v1/tasks/keep", body: `{"delay":"1s","due_at":"2030-01-02T15:04:05Z"}`, status: 422, code: "invalid_task"},
		{name: "reschedule bad due_at", method: "PATCH", path: "/v1/tasks/keep", body: `{"due_at":"2030-13-02T15:04:05Z"}`, status: 422, code: "invalid_task", msg: "due_at"},
		{name: "reschedule unknown field", method: "PATCH", path: "/v1/tasks/keep", body: `{"delay":"1s","type":"y"}`, status: 400, code: "unknown_field"},
		{name: "reschedule invalid JSON", method: "PATCH", path: "/v1/tasks/keep", body: `{"delay":`, status: 400, code: "invalid_json"},
		{name: "reschedule wrong content type", method: "PATCH", path: "/v1/tasks/keep", body: `{"delay":"1s"}`, contentType: "text/plain", status: 415, code: "unsupported_media_type"},
		{name: "reschedule missing token", method: "PATCH", path: "/v1/tasks/keep", body: `{"delay":"1s"}`, auth: "-", status: 401, code: "unauthorized"},
		{name: "reschedule too large", method: "PATCH", path: "/v1/tasks/keep", body: big, status: 413, code: "too_large"},
		{name: "path id with control character", method: "DELETE", path: "/v1/tasks/a%01b", status: 422, code: "invalid_task", msg: "id:"},
		{name: "path id too long", method: "PATCH", path: "/v1/tasks/" + strings.Repeat("k", 201), body: `{"delay":"1s"}`, status: 422, code: "invalid_task", msg: "id:"},
		{name: "redrive missing token", method: "POST", path: "/v1/dead/keep/redrive", auth: "-", status: 401, code: "unauthorized"},
		{name: "dead list limit too high", method: "GET", path: "/v1/dead?limit=100000", status: 422, code: "invalid_task", msg: "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, path := c.method, c.path
			if method == "" {
				method = "POST"
			}
			if path == "" {
				path = "/v1/tasks"
			}
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
				if c.chunked {
					body = io.MultiReader(body) // hides the length: chunked encoding
				}
			}
			req, err := http.NewRequest(method, app.base+path, body)
			if err != nil {
				t.Fatal(err)
			}
			switch c.contentType {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				req.Header.Set("Content-Type", c.contentType)
			}
			switch c.auth {
			case "":
				req.Header.Set("Authorization", good)
			case "-":
			default:
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			rp := reply{Status: resp.StatusCode, Raw: raw}
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, raw)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q: %s", ct, raw)
			}
			if err := jsonUnmarshal(raw, &rp.JSON); err != nil {
				t.Fatalf("answer is not JSON: %v: %s", err, raw)
			}
			if rp.errCode() != c.code {
				t.Fatalf("code %q, want %q: %s", rp.errCode(), c.code, raw)
			}
			if !strings.Contains(rp.errMessage(), c.msg) {
				t.Fatalf("message %q lacks %q", rp.errMessage(), c.msg)
			}
			if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}

	statsAfter, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(statsBefore, statsAfter) {
		t.Errorf("shard stats changed:\nbefore %+v\nafter  %+v", statsBefore, statsAfter)
	}
	if k := keyCount(t, rdb, cfg.Namespace); k != keysBefore {
		t.Errorf("namespace has %d keys, had %d", k, keysBefore)
	}
	if keepAfter := app.do("GET", "/v1/tasks/keep", ""); string(keepAfter.Raw) != string(keepBefore.Raw) {
		t.Errorf("task changed:\nbefore %s\nafter  %s", keepBefore.Raw, keepAfter.Raw)
	}
	if d := app.JournalDepth(); d != 0 {
		t.Errorf("journal depth %d", d)
	}
	m := app.do("GET", "/metrics", "")
	for _, o := range []string{"unchanged", "updated", "rejected", "journaled"} {
		if !strings.Contains(string(m.Raw), `delayq_tasks_scheduled_total{outcome="`+o+`"} 0`) {
			t.Errorf("delayq_tasks_scheduled_total{outcome=%q} moved", o)
		}
	}
	if !strings.Contains(string(m.Raw), `delayq_tasks_scheduled_total{outcome="created"} 1`) {
		t.Errorf("delayq_tasks_scheduled_total{outcome=\"created\"} is not 1")
	}
	if strings.Contains(string(m.Raw), `code="500"`) {
		t.Errorf("a hostile request got a 500")
	}
}
