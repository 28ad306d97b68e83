package daemon

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
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
		origin                   string // the Origin header (a browser's); default none
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
		// the scheme is case-insensitive (RFC 9110): these reach the decoder
		{name: "lower-case scheme", body: `{"type":"x","dely":"1h"}`, auth: "bearer s3cret-token", status: 400, code: "unknown_field", msg: "dely"},
		{name: "upper-case scheme", body: `{"type":"x","dely":"1h"}`, auth: "BEARER s3cret-token", status: 400, code: "unknown_field", msg: "dely"},
		{name: "lower-case scheme, wrong token", body: `{"type":"x"}`, auth: "bearer s3cret-tokem", status: 401, code: "unauthorized"},
		{name: "token in another case", body: `{"type":"x"}`, auth: "Bearer S3CRET-TOKEN", status: 401, code: "unauthorized"},
		{name: "scheme without token", body: `{"type":"x"}`, auth: "Bearer", status: 401, code: "unauthorized"},
		{name: "scheme glued to token", body: `{"type":"x"}`, auth: "Bearers3cret-token", status: 401, code: "unauthorized"},
		// a write says JSON, body or not; a browser page of another origin cannot write
		{name: "body-less cancel without content type", method: "DELETE", path: "/v1/tasks/keep", contentType: "-", status: 415, code: "unsupported_media_type", msg: "application/json"},
		{name: "body-less cancel as a form", method: "DELETE", path: "/v1/tasks/keep", contentType: "application/x-www-form-urlencoded", status: 415, code: "unsupported_media_type"},
		{name: "redrive as a form", method: "POST", path: "/v1/dead/keep/redrive", contentType: "application/x-www-form-urlencoded", status: 415, code: "unsupported_media_type"},
		{name: "cross-origin schedule", body: `{"type":"x"}`, origin: "https://evil.example", status: 403, code: "cross_origin", msg: "evil.example"},
		{name: "cross-origin cancel", method: "DELETE", path: "/v1/tasks/keep", origin: "https://evil.example", status: 403, code: "cross_origin"},
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
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
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

// --- the route-wide suite: every route, read from api/openapi.yaml and
// from the source of routes() (openapi_test.go), so that a new route is
// covered without a new line here ---

// v1Route is one /v1 operation: its method and its path pattern.
type v1Route struct{ method, path string }

func (r v1Route) String() string { return r.method + " " + r.path }

func (r v1Route) write() bool {
	switch r.method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// v1Routes is every /v1 operation the daemon documents or registers.
func v1Routes(t *testing.T) []v1Route {
	t.Helper()
	seen := make(map[v1Route]bool)
	var out []v1Route
	add := func(method, path string) {
		path = strings.TrimSuffix(path, "{$}")
		r := v1Route{method, path}
		if strings.HasPrefix(path, "/v1/") && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, o := range loadOpenAPI(t).ops() {
		add(o.method, o.path)
	}
	for _, p := range registeredPatterns(t) {
		if m, path, ok := strings.Cut(p, " "); ok {
			add(m, path)
		}
	}
	writes := 0
	for _, r := range out {
		if r.write() {
			writes++
		}
	}
	if len(out) < 25 || writes < 15 {
		t.Fatalf("only %d routes (%d writes) found: %v", len(out), writes, out)
	}
	slices.SortFunc(out, func(a, b v1Route) int { return strings.Compare(a.String(), b.String()) })
	return out
}

var pathParam = regexp.MustCompile(`\{[^}/]+\}`)

// fillPath puts v (already escaped for a path) in every {param} of path.
func fillPath(path, v string) string {
	return pathParam.ReplaceAllLiteralString(path, v)
}

// noRedirect is a client that returns a redirect as the answer (the mux
// redirects unclean paths; a followed 301 would turn a POST into a GET).
var noRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// send sends one request with headers h (and no others) without following
// redirects, and returns the answer.
func send(t *testing.T, method, rawURL, body string, h http.Header) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, rawURL, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, task.Truncate(rawURL, 200), err)
	}
	req.Header = h
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, task.Truncate(rawURL, 200), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, task.Truncate(rawURL, 200), err)
	}
	rp := reply{Status: resp.StatusCode, Raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &rp.JSON); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v: %s", method, task.Truncate(rawURL, 200), err, task.Truncate(string(raw), 300))
		}
	}
	if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("%s %s: 401 without WWW-Authenticate", method, task.Truncate(rawURL, 200))
	}
	return rp
}

// startGuardedApp is a daemon with Redis and etcd (so that no route
// answers 503) and the namespace's shard map; token "" for none.
func startGuardedApp(t *testing.T, token string, allowed ...string) (*testApp, *redis.Client, *clientv3.Client) {
	t.Helper()
	r, e, cfg := startRedisEtcd(t)
	cfg.APIToken = token
	cfg.Shards = 2
	cfg.AllowedOrigins = allowed
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	app := startApp(t, cfg)
	cli := e.Client(t)
	if _, err := (shardmap.Etcd{Client: cli, Namespace: cfg.Namespace}).Ensure(t.Context(), shardmap.Initial(cfg.Shards)); err != nil {
		t.Fatal(err)
	}
	return app, r.Client(t), cli
}

// TestAuthEveryRoute: with a token set, every /v1 route (and a /v1 path
// no route serves) answers 401 to a missing, wrong or malformed token,
// and lets the right token through whatever the case of its scheme.
func TestAuthEveryRoute(t *testing.T) {
	const tok = "s3cret-token"
	app, _, _ := startGuardedApp(t, tok)
	refused := []string{"-", "Bearer wrong", "bearer wrong", "Bearer " + strings.ToUpper(tok), "Bearer " + tok + "x",
		"Bearer " + tok[:len(tok)-1], "Basic czNjcmV0LXRva2Vu", "Bearer", "Bearer" + tok, "Token " + tok, tok}
	passed := []string{"Bearer " + tok, "bearer " + tok, "BEARER " + tok, "bEaReR " + tok, "Bearer  " + tok}
	routes := append(v1Routes(t), v1Route{"GET", "/v1/nope"}, v1Route{"POST", "/v1/nope/{id}"}, v1Route{"DELETE", "/v1/stats"})
	for _, r := range routes {
		path := fillPath(r.path, "auth-none")
		for _, auth := range refused {
			h := http.Header{"Content-Type": {"application/json"}}
			if auth != "-" {
				h.Set("Authorization", auth)
			}
			// a form post of another origin gets 401 too: no answer
			// tells a caller without the token anything else
			if auth == "-" && r.write() {
				h = http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {"https://evil.example"}}
			}
			if got := send(t, r.method, app.base+path, "", h); got.Status != http.StatusUnauthorized || got.errCode() != "unauthorized" {
				t.Errorf("%s with Authorization %q: %d %s, want 401 unauthorized", r, auth, got.Status, task.Truncate(string(got.Raw), 200))
			}
		}
		for _, auth := range passed {
			h := http.Header{"Authorization": {auth}}
			if r.write() {
				h.Set("Content-Type", "application/json")
			}
			if got := send(t, r.method, app.base+path, "", h); got.Status == http.StatusUnauthorized || got.Status >= 500 {
				t.Errorf("%s with Authorization %q: %d %s", r, auth, got.Status, task.Truncate(string(got.Raw), 200))
			}
		}
	}
}

// evilOrigin is the page a hostile site serves.
const evilOrigin = "https://evil.example"

// TestCrossSiteWritesRefused: with the default configuration (no token),
// a browser page of another origin cannot change anything through any
// write route: a form post (urlencoded, multipart, text/plain carrying a
// JSON body), with Origin or Sec-Fetch-Site, is 403 cross_origin; a write
// without Content-Type application/json is 415 even from the daemon's own
// origin or from no browser at all. Each decision is the same for a path
// no route serves. Afterwards Redis and etcd are exactly as before.
func TestCrossSiteWritesRefused(t *testing.T) {
	doc := loadOpenAPI(t)
	for _, o := range doc.ops() {
		if r := v1Route(o); r.write() && strings.HasPrefix(o.path, "/v1/") {
			for _, st := range []int{http.StatusForbidden, http.StatusUnsupportedMediaType} {
				if !slices.Contains(doc.statuses(o), st) {
					t.Errorf("%s: a write that does not document %d (api/openapi.yaml)", o, st)
				}
			}
		}
	}
	app, rdb, cli := startGuardedApp(t, "")
	st := openStore(t, rdb, app.cfg)
	ns := app.cfg.Namespace
	// Something for every write to change: a task, a dead task, a paused
	// and a running type, a schedule, a rate limit.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/tasks", `{"id":"dead-1","type":"csrf.t"}`},
		{"POST", "/v1/tasks", `{"id":"keep","type":"csrf.t","delay":"1h"}`},
		{"PUT", "/v1/schedules/keep-s", `{"cron":"@hourly","task":{"type":"csrf.t"}}`},
		{"PUT", "/v1/limits/csrf.t", `{"concurrency":{"limit":3}}`},
		{"POST", "/v1/types/csrf.p/pause", ""},
	} {
		if got := app.do(c.method, c.path, c.body); got.Status/100 != 2 {
			t.Fatalf("set-up %s %s: %d %s", c.method, c.path, got.Status, got.Raw)
		}
	}
	if dead := killAll(t, st); !slices.Equal(dead, []string{"dead-1"}) {
		t.Fatalf("set-up: dead %v", dead)
	}
	fill := func(path string) string {
		switch {
		case strings.HasPrefix(path, "/v1/dead/"):
			return fillPath(path, "dead-1")
		case strings.HasPrefix(path, "/v1/schedules/"):
			return fillPath(path, "keep-s")
		case strings.HasSuffix(path, "/resume"):
			return fillPath(path, "csrf.p")
		case strings.HasPrefix(path, "/v1/tasks/"):
			return fillPath(path, "keep")
		}
		return fillPath(path, "csrf.t")
	}
	// A body the endpoint would take (sent as text/plain it is what an
	// HTML form with enctype=text/plain can forge).
	bodies := map[string]string{
		"POST /v1/tasks":              `{"id":"evil","type":"csrf.t"}`,
		"POST /v1/tasks/batch":        `{"tasks":[{"id":"evil","type":"csrf.t"}]}`,
		"POST /v1/tasks/cancel":       `{"filter":{}}`,
		"PATCH /v1/tasks/{id}":        `{"delay":"5h"}`,
		"POST /v1/dead/redrive":       `{"ids":["dead-1"]}`,
		"PUT /v1/shards":              `{"count":4}`,
		"PUT /v1/schedules/{id}":      `{"cron":"@daily","task":{"type":"evil"}}`,
		"PUT /v1/limits/{type}":       `{"concurrency":{"limit":1}}`,
		"POST /v1/types/{type}/pause": ``,
	}

	type snapshot struct {
		redis map[string]string
		etcd  map[string]int64
		reads map[string]string
	}
	take := func() snapshot {
		t.Helper()
		s := snapshot{redis: redisDump(t, rdb, ns), etcd: etcdRevisions(t, cli, ns), reads: map[string]string{}}
		for _, p := range []string{"/v1/tasks/keep", "/v1/tasks?state=dead", "/v1/types", "/v1/schedules/keep-s", "/v1/limits", "/v1/shards"} {
			got := app.do("GET", p, "")
			if got.Status != 200 {
				t.Fatalf("GET %s: %d %s", p, got.Status, got.Raw)
			}
			s.reads[p] = string(got.Raw)
		}
		return s
	}
	before := take()

	self := app.base // the daemon's own origin: http://127.0.0.1:port
	type browser struct {
		name   string
		header http.Header
		body   func(r v1Route) string
		status int
		code   string
	}
	form := func(v1Route) string { return "id=keep&type=csrf.t" }
	jsonBody := func(r v1Route) string { return bodies[r.String()] }
	browsers := []browser{
		{"urlencoded form, Origin", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {evilOrigin}}, form, 403, "cross_origin"},
		{"urlencoded form, Sec-Fetch-Site", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {evilOrigin}, "Sec-Fetch-Site": {"cross-site"}}, form, 403, "cross_origin"},
		{"multipart form", http.Header{"Content-Type": {"multipart/form-data; boundary=x"}, "Origin": {evilOrigin}}, func(v1Route) string { return "--x--\r\n" }, 403, "cross_origin"},
		{"text/plain form with JSON", http.Header{"Content-Type": {"text/plain"}, "Origin": {evilOrigin}}, jsonBody, 403, "cross_origin"},
		{"text/plain, Sec-Fetch-Site only", http.Header{"Content-Type": {"text/plain"}, "Sec-Fetch-Site": {"cross-site"}}, jsonBody, 403, "cross_origin"},
		{"same-site page", http.Header{"Content-Type": {"text/plain"}, "Origin": {"http://a.127.0.0.1"}, "Sec-Fetch-Site": {"same-site"}}, jsonBody, 403, "cross_origin"},
		{"sandboxed page (Origin null)", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {"null"}}, form, 403, "cross_origin"},
		{"JSON from another origin", http.Header{"Content-Type": {"application/json"}, "Origin": {evilOrigin}}, jsonBody, 403, "cross_origin"},
		{"form of an old browser (no Origin)", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, form, 415, "unsupported_media_type"},
		{"text/plain, no Origin", http.Header{"Content-Type": {"text/plain"}}, jsonBody, 415, "unsupported_media_type"},
		{"form from the daemon's own origin", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {self}}, form, 415, "unsupported_media_type"},
		{"no Content-Type, same origin", http.Header{"Origin": {self}, "Sec-Fetch-Site": {"same-origin"}}, func(v1Route) string { return "" }, 415, "unsupported_media_type"},
	}
	routes := v1Routes(t)
	// paths no route serves: the same answers (no route is revealed)
	routes = append(routes, v1Route{"POST", "/v1/nope"}, v1Route{"DELETE", "/v1/stats"}, v1Route{"PUT", "/v1/types/{type}/pause"})
	for _, r := range routes {
		if !r.write() {
			// any other method than a read counts as a write
			r.method = "PROPPATCH"
		}
		for _, b := range browsers {
			got := send(t, r.method, app.base+fill(r.path), b.body(r), b.header.Clone())
			if got.Status != b.status || got.errCode() != b.code {
				t.Errorf("%s, %s: %d %s, want %d %s", r, b.name, got.Status, task.Truncate(string(got.Raw), 200), b.status, b.code)
			}
			if b.status == 415 && !strings.Contains(got.errMessage(), "application/json") {
				t.Errorf("%s, %s: the message does not say what to send: %q", r, b.name, got.errMessage())
			}
		}
	}
	// Unclean paths to a write route: redirected or refused, never run.
	for _, p := range []string{"//v1/types/csrf.t/pause", "/v1/./types/csrf.t/pause", "/v1/types/x/../csrf.t/pause",
		"/v1/types/csrf.t/pause/", "/V1/types/csrf.t/pause", "/v1/types/csrf.p/resume?x=1", "/v1//dead/dead-1/redrive"} {
		for _, b := range browsers[:1] {
			if got := send(t, "POST", app.base+p, b.body(v1Route{}), b.header.Clone()); got.Status/100 == 2 || got.Status >= 500 {
				t.Errorf("POST %s, %s: %d %s", p, b.name, got.Status, task.Truncate(string(got.Raw), 200))
			}
		}
	}

	after := take()
	if !reflect.DeepEqual(before.redis, after.redis) {
		t.Errorf("redis changed:\nbefore %v\nafter  %v", before.redis, after.redis)
	}
	if !reflect.DeepEqual(before.etcd, after.etcd) {
		t.Errorf("etcd changed:\nbefore %v\nafter  %v", before.etcd, after.etcd)
	}
	for p, b := range before.reads {
		if after.reads[p] != b {
			t.Errorf("GET %s changed:\nbefore %s\nafter  %s", p, b, after.reads[p])
		}
	}
}

// TestSameOriginWrites: the daemon's own origin (the console), the
// origins of DQ_ALLOWED_ORIGINS (written in any case, with a default
// port or a trailing slash) and clients that are no browser can write;
// any other origin cannot; reads are never refused for their origin.
func TestSameOriginWrites(t *testing.T) {
	app, _, _ := startGuardedApp(t, "", "HTTPS://Ops.Example.com:443/", "http://localhost:8080")
	pause := func(h http.Header) reply {
		t.Helper()
		return send(t, "POST", app.base+"/v1/types/so.t/pause", "", h)
	}
	for _, c := range []struct {
		name   string
		h      http.Header
		status int
	}{
		{"no browser", http.Header{"Content-Type": {"application/json"}}, 200},
		{"charset parameter", http.Header{"Content-Type": {"application/json; charset=utf-8"}}, 200},
		{"the daemon's own origin", http.Header{"Content-Type": {"application/json"}, "Origin": {app.base}}, 200},
		{"the console (Sec-Fetch-Site)", http.Header{"Content-Type": {"application/json"}, "Origin": {app.base}, "Sec-Fetch-Site": {"same-origin"}}, 200},
		{"an allowed origin", http.Header{"Content-Type": {"application/json"}, "Origin": {"https://ops.example.com"}, "Sec-Fetch-Site": {"cross-site"}}, 200},
		{"another allowed origin", http.Header{"Content-Type": {"application/json"}, "Origin": {"http://localhost:8080"}}, 200},
		{"another origin", http.Header{"Content-Type": {"application/json"}, "Origin": {evilOrigin}}, 403},
		{"an allowed host's other scheme", http.Header{"Content-Type": {"application/json"}, "Origin": {"http://ops.example.com"}}, 403},
		{"an allowed host's other port", http.Header{"Content-Type": {"application/json"}, "Origin": {"https://ops.example.com:8443"}}, 403},
		{"an allowed host as a prefix", http.Header{"Content-Type": {"application/json"}, "Origin": {"https://ops.example.com.evil.example"}}, 403},
		{"a subdomain", http.Header{"Content-Type": {"application/json"}, "Origin": {"https://x.ops.example.com"}, "Sec-Fetch-Site": {"same-site"}}, 403},
		{"another type", http.Header{"Content-Type": {"application/jsonx"}}, 415},
		{"a JSON-like type", http.Header{"Content-Type": {"text/json"}}, 415},
		{"a JSON suffix type", http.Header{"Content-Type": {"application/merge-patch+json"}}, 415},
		{"a malformed type", http.Header{"Content-Type": {"application/json; charset"}}, 415},
	} {
		if got := pause(c.h); got.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, got.Status, task.Truncate(string(got.Raw), 200), c.status)
		}
	}
	if !app.typesList()["so.t"].Paused {
		t.Error("so.t is not paused")
	}
	if got := send(t, "GET", app.base+"/v1/types", "", http.Header{"Origin": {evilOrigin}, "Sec-Fetch-Site": {"cross-site"}}); got.Status != 200 {
		t.Errorf("a read from another origin: %d %s", got.Status, got.Raw)
	}
	cfg := app.cfg
	cfg.AllowedOrigins = []string{"https://ops.example.com#x"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "DQ_ALLOWED_ORIGINS") {
		t.Errorf("an origin with a fragment: %v", err)
	}
}

// TestHostileEveryRoute sends every /v1 route bad path values, bad query
// parameters and bad bodies (with the token): none gets a 5xx, and every
// error answer is JSON with a code.
func TestHostileEveryRoute(t *testing.T) {
	const tok = "s3cret-token"
	app, _, _ := startGuardedApp(t, tok)
	long := strings.Repeat("a", 10<<10)
	paths := []string{
		long, "%FF%FE", "%C0%AF", "%ED%A0%80", "..", "%2E%2E", ".", "%2E", "%00", "a%00b", "a%0Ab", "%0D%0A", "%7F", "%1B%5B31m",
		"a%2Fb", "a%20b", "%25", "%25zz", "a%3Fb", "a%23b", "%3Cscript%3E", "%F0%9F%92%A5", "-", "~", "a:b", "a@b",
		strings.Repeat("%C3%A9", 300),
	}
	queries := []string{
		"?limit=-1", "?limit=0", "?limit=99999999999999999999", "?limit=abc", "?limit=1&limit=2", "?type=%FF", "?type=a%00b",
		"?state=bogus", "?state=", "?cursor=%00", "?cursor=" + long, "?%zz", "?a=%zz", "?x=" + long, "?filter=%7B",
		"?due_before=9999999999999999999", "?due_after=-1", "?ids=a&ids=b", "?;", "?&&&", "?type=" + strings.Repeat("%FF", 500),
	}
	bodies := []string{
		"", "{", "}", "null", "[]", `"x"`, "1e999", "-0", "true", strings.Repeat("[", 100_000), strings.Repeat(`{"a":`, 10_000),
		`{"a":` + strings.Repeat("9", 10_000) + `}`, "\xff\xfe", "{\"id\":\"\xff\"}", `{"id":"\ud800"}`, "{\"type\":\"x\"}\x00",
		`{"tasks":null}`, `{"tasks":[null]}`, `{"ids":[null]}`, `{"ids":"a"}`, `{"filter":{"type":{}}}`, `{"filter":null}`,
		`{"count":-1}`, `{"count":1e99}`, `{"count":"4"}`, `{"cron":"` + long + `"}`, `{"cron":"* * * * * * * *","task":{}}`,
		`{"concurrency":{"limit":-1}}`, `{"window_quota":{"limit":1,"window":"-1s"}}`, `{"delay":"9999999999h"}`,
		`{"due_at":"9999-12-31T23:59:59Z"}`, `{"":""}`, `{"__proto__":{}}`, strings.Repeat(" ", 70_000) + "{}",
		`{"x":"` + strings.Repeat("a", 2<<20) + `"}`,
	}
	check := func(r v1Route, what, path, body string) {
		t.Helper()
		h := http.Header{"Authorization": {"Bearer " + tok}}
		if r.write() {
			h.Set("Content-Type", "application/json")
		}
		got := send(t, r.method, app.base+path, body, h)
		switch {
		case got.Status >= 500:
			t.Errorf("%s, %s: %d %s", r, what, got.Status, task.Truncate(string(got.Raw), 300))
		case got.Status >= 400 && got.errCode() == "" && got.Status != http.StatusRequestHeaderFieldsTooLarge:
			t.Errorf("%s, %s: %d without a JSON error: %s", r, what, got.Status, task.Truncate(string(got.Raw), 300))
		}
	}
	for _, r := range v1Routes(t) {
		base := fillPath(r.path, "hostile-none")
		if base != r.path {
			for _, v := range paths {
				check(r, "path value "+task.Truncate(v, 40), fillPath(r.path, v), "")
			}
		}
		for _, q := range queries {
			check(r, "query "+task.Truncate(q, 40), base+q, "")
		}
		if r.write() {
			for _, b := range bodies {
				check(r, "body "+strconv.Quote(task.Truncate(b, 40)), base, b)
			}
		}
	}
}

// redisDump is every key of the namespace with its DUMP: equal dumps, the
// same values.
func redisDump(t *testing.T, rdb *redis.Client, ns string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	iter := rdb.Scan(t.Context(), 0, "dq:{"+ns+"*", 1000).Iterator()
	for iter.Next(t.Context()) {
		v, err := rdb.Dump(t.Context(), iter.Val()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out[iter.Val()] = v
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// etcdRevisions is every etcd key of the namespace with its revision.
func etcdRevisions(t *testing.T, cli *clientv3.Client, ns string) map[string]int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/"+ns+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		// the daemon's own process record (package registry) is written
		// by itself, once it starts and again when its lease is renewed,
		// whatever the requests: not a change a request made (under load
		// it landed between the snapshots)
		if strings.HasPrefix(string(kv.Key), registry.Prefix(ns)) {
			continue
		}
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}
