package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/testenv"
)

// The /v1/limits endpoints (limits.go) served on their own, without the
// daemon's guard; limits_test.go tests them mounted in the daemon.

type apiEnv struct {
	h     http.Handler
	rules *ratelimit.Rules
	rdb   redis.UniversalClient
	etcd  *testenv.Etcd
	ns    string
}

func newAPIEnv(t *testing.T, rdb redis.UniversalClient) *apiEnv {
	t.Helper()
	e := &apiEnv{etcd: testenv.StartEtcd(t), ns: uniqueNS(t), rdb: rdb}
	if rdb == nil {
		e.rdb = testenv.StartRedis(t).Client(t)
	}
	var err error
	if e.rules, err = ratelimit.NewRules(e.etcd.Client(t), e.ns, nil); err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.NewLimiter(e.rdb, nil, ratelimit.Options{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	(&limitsAPI{rules: e.rules, lim: lim, maxBody: 1024}).mount(mux)
	e.h = mux
	return e
}

type apiResp struct {
	status int
	header http.Header
	body   []byte
}

func (e *apiEnv) do(t *testing.T, method, path, ctype string, body io.Reader) apiResp {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, body)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return apiResp{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func (r apiResp) decode(t *testing.T, v any) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("answer %s: %v", r.body, err)
	}
}

type errAnswer struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type viewAnswer struct {
	Type       string          `json:"type"`
	Rule       json.RawMessage `json:"rule"`
	Usage      *api.LimitUsage `json:"usage"`
	UsageError string          `json:"usage_error"`
}

// raw is the etcd value and mod revision of a type's rule.
func (e *apiEnv) raw(t *testing.T, typ string) (string, int64) {
	t.Helper()
	resp, err := e.etcd.Client(t).Get(t.Context(), "/"+e.ns+"/limits/"+typ)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

func TestLimitsGoodBodies(t *testing.T) {
	e := newAPIEnv(t, nil)
	cases := []struct {
		typ, ctype, body string
		want             string // the rule as answered and stored
	}{
		{"mail", "application/json", `{"window_quota":{"limit":600,"window":"10s"}}`,
			`{"window_quota":{"limit":600,"window":"10s"}}`},
		{"mail", "application/json; charset=utf-8", `{"window_quota":{"limit":60,"window":"1m"}}`,
			`{"window_quota":{"limit":60,"window":"1m0s"}}`},
		{"api.call", "application/json", `{"token_bucket":{"rate":200,"burst":50,"reserve":10,"min_priority":5}}`,
			`{"token_bucket":{"rate":200,"burst":50,"reserve":10,"min_priority":5}}`},
		{"render", "application/json", ` {"concurrency":{"limit":5,"slot_ttl":"30s"},"token_bucket":{"rate":0.5,"burst":1}} `,
			`{"token_bucket":{"rate":0.5,"burst":1,"reserve":0,"min_priority":0},"concurrency":{"limit":5,"slot_ttl":"30s"}}`},
	}
	for _, c := range cases {
		r := e.do(t, "PUT", "/v1/limits/"+c.typ, c.ctype, strings.NewReader(c.body))
		if r.status != http.StatusOK {
			t.Fatalf("PUT %s %s: %d %s", c.typ, c.body, r.status, r.body)
		}
		var v viewAnswer
		r.decode(t, &v)
		if v.Type != c.typ || string(v.Rule) != c.want || v.Usage == nil {
			t.Fatalf("PUT answer %s", r.body)
		}
		if stored, _ := e.raw(t, c.typ); stored != c.want {
			t.Fatalf("stored %s, want %s", stored, c.want)
		}
	}

	// usage reflects what limiters admitted
	r := e.admitAndGet(t, "mail", 7)
	var v viewAnswer
	r.decode(t, &v)
	if r.status != 200 || v.Usage.WindowCount != 7 {
		t.Fatalf("GET mail: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(r.body), `"usage":{"window_count":7,"tokens":0,"running":0}`) {
		t.Fatalf("usage shape: %s", r.body)
	}

	r = e.do(t, "GET", "/v1/limits", "", nil)
	var list struct {
		Limits []viewAnswer `json:"limits"`
	}
	r.decode(t, &list)
	if r.status != 200 || len(list.Limits) != 3 || list.Limits[0].Type != "api.call" || list.Limits[1].Type != "mail" || list.Limits[2].Type != "render" {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if list.Limits[0].Usage == nil || list.Limits[0].Usage.Tokens != 50 {
		t.Fatalf("api.call usage: %s", r.body)
	}

	r = e.do(t, "DELETE", "/v1/limits/mail", "", nil)
	if r.status != 200 || string(r.body) != `{"type":"mail","deleted":true}`+"\n" {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	for _, m := range []string{"GET", "DELETE"} {
		r = e.do(t, m, "/v1/limits/mail", "", nil)
		var ea errAnswer
		r.decode(t, &ea)
		if r.status != 404 || ea.Error.Code != "not_found" {
			t.Fatalf("%s after delete: %d %s", m, r.status, r.body)
		}
	}
}

// Hostile requests answer 4xx with the error shape and leave the stored
// rule exactly as it was (same value, same etcd revision).
func TestLimitsHostileBodies(t *testing.T) {
	e := newAPIEnv(t, nil)
	const good = `{"window_quota":{"limit":600,"window":"10s"}}`
	if r := e.do(t, "PUT", "/v1/limits/mail", "application/json", strings.NewReader(good)); r.status != 200 {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}
	before, rev := e.raw(t, "mail")
	big := `{"window_quota":{"limit":600,"window":"10s"}}` + strings.Repeat(" ", 2000)
	cases := []struct {
		name, method, path, ctype string
		body                      io.Reader
		status                    int
		code                      string
	}{
		{"negative limit", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":-600,"window":"10s"}}`), 422, "invalid_rule"},
		{"zero window", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":600,"window":"0s"}}`), 422, "invalid_rule"},
		{"negative window", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":600,"window":"-1m"}}`), 422, "invalid_rule"},
		{"unknown field", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":600,"window":"10s"},"priority":1}`), 400, "unknown_field"},
		{"unknown nested field", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"concurrency":{"limit":5,"slot_ttl":"5s","ttl":"5s"}}`), 400, "unknown_field"},
		{"huge limit", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":1e30,"window":"10s"}}`), 422, "invalid_rule"},
		{"limit over 1e9", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":1000000001,"window":"10s"}}`), 422, "invalid_rule"},
		{"huge window", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":5,"window":"99999999999h"}}`), 422, "invalid_rule"},
		{"huge rate", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"token_bucket":{"rate":1e400,"burst":5}}`), 422, "invalid_rule"},
		{"huge burst", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"token_bucket":{"rate":5,"burst":99999999999999999999}}`), 422, "invalid_rule"},
		{"rate below one a day", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"token_bucket":{"rate":1e-17}}`), 422, "invalid_rule"},
		{"reserve >= burst", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"token_bucket":{"rate":5,"burst":5,"reserve":5}}`), 422, "invalid_rule"},
		{"zero concurrency", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"concurrency":{"limit":0,"slot_ttl":"5s"}}`), 422, "invalid_rule"},
		{"slot_ttl too short", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"concurrency":{"limit":3,"slot_ttl":"1ms"}}`), 422, "invalid_rule"},
		{"empty rule", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{}`), 422, "invalid_rule"},
		{"null", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`null`), 400, "invalid_json"},
		{"array", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`[1]`), 400, "invalid_json"},
		{"broken JSON", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":`), 400, "invalid_json"},
		{"empty body", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(``), 400, "invalid_json"},
		{"trailing data", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(good + `x`), 400, "invalid_json"},
		{"text/plain", "PUT", "/v1/limits/mail", "text/plain", strings.NewReader(good), 415, "unsupported_media_type"},
		{"no content type", "PUT", "/v1/limits/mail", "", strings.NewReader(good), 415, "unsupported_media_type"},
		{"form", "PUT", "/v1/limits/mail", "application/x-www-form-urlencoded", strings.NewReader(good), 415, "unsupported_media_type"},
		{"oversized", "PUT", "/v1/limits/mail", "application/json", strings.NewReader(big), 413, "too_large"},
		{"oversized without length", "PUT", "/v1/limits/mail", "application/json", io.MultiReader(strings.NewReader(big)), 413, "too_large"},
		{"bad type in path", "PUT", "/v1/limits/a%2Fb", "application/json", strings.NewReader(good), 422, "invalid_rule"},
		{"type too long", "PUT", "/v1/limits/" + strings.Repeat("t", 201), "application/json", strings.NewReader(good), 422, "invalid_rule"},
		{"POST", "POST", "/v1/limits/mail", "application/json", strings.NewReader(good), 405, "method_not_allowed"},
		{"PUT on the list", "PUT", "/v1/limits", "application/json", strings.NewReader(good), 405, "method_not_allowed"},
		{"hostile body for a new type", "PUT", "/v1/limits/fresh", "application/json", strings.NewReader(`{"concurrency":{"limit":-1,"slot_ttl":"5s"}}`), 422, "invalid_rule"},
		{"delete unknown type", "DELETE", "/v1/limits/fresh", "", nil, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, c.path, c.ctype, c.body)
			var ea errAnswer
			r.decode(t, &ea)
			if r.status != c.status || ea.Error.Code != c.code || ea.Error.Message == "" {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, c.status, c.code)
			}
			t.Logf("%d %s", r.status, strings.TrimSpace(string(r.body)))
			if after, arev := e.raw(t, "mail"); after != before || arev != rev {
				t.Fatalf("stored rule changed: %s (rev %d) -> %s (rev %d)", before, rev, after, arev)
			}
			if v, _ := e.raw(t, "fresh"); v != "" {
				t.Fatalf("a rule was created: %s", v)
			}
		})
	}
}

// With Redis down the rules stay manageable; usage is null with a reason.
func TestLimitsRedisDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newAPIEnv(t, rdb)
	srv.Kill(t)
	r := e.do(t, "PUT", "/v1/limits/mail", "application/json", strings.NewReader(`{"window_quota":{"limit":1,"window":"1s"}}`))
	var v viewAnswer
	r.decode(t, &v)
	if r.status != 200 || v.Usage != nil || v.UsageError == "" {
		t.Fatalf("PUT with Redis down: %d %s", r.status, r.body)
	}
	if got, ok, err := e.rules.Get(t.Context(), "mail"); err != nil || !ok || got.WindowQuota.Limit != 1 {
		t.Fatalf("rule not stored: %v %v", ok, err)
	}
}

// admitAndGet has a worker's limiter admit n tasks of typ (whose rule is a
// window quota) and answers GET /v1/limits/{typ}, both within one quota
// window by Redis' clock: when a window ended in between, it waits for
// the next one to start and does it again.
func (e *apiEnv) admitAndGet(t *testing.T, typ string, n int) apiResp {
	t.Helper()
	rule, ok, err := e.rules.Get(t.Context(), typ)
	if err != nil || !ok || rule.WindowQuota == nil {
		t.Fatalf("rule of %s: %+v %v %v", typ, rule, ok, err)
	}
	worker, err := ratelimit.NewLimiter(e.rdb, ratelimit.StaticRules{typ: rule}, ratelimit.Options{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]ratelimit.Item, n)
	for i := range items {
		items[i] = ratelimit.Item{ID: fmt.Sprintf("%s-%d", typ, i), Type: typ}
	}
	win := rule.WindowQuota.Window.D().Milliseconds()
	for range 3 {
		before := redisMillis(t, e.rdb)
		if _, err := worker.Admit(t.Context(), items); err != nil {
			t.Fatal(err)
		}
		r := e.do(t, "GET", "/v1/limits/"+typ, "", nil)
		after := redisMillis(t, e.rdb)
		if before/win == after/win {
			return r
		}
		time.Sleep(time.Duration((after/win+1)*win-after+1) * time.Millisecond) // a fresh window: nothing counted yet
	}
	t.Fatalf("%s: a quota window ended during each of 3 tries", typ)
	return apiResp{}
}

// redisMillis is Redis' clock in ms.
func redisMillis(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	tm, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

// A rule's scope and order travel through PUT, etcd and GET as sent; a
// scope the rule validation refuses answers 422 invalid_rule naming
// "scope", and leaves the stored rule alone.
func TestLimitsScope(t *testing.T) {
	e := newAPIEnv(t, nil)
	for _, c := range []struct{ typ, body, want string }{
		{"order.pay", `{"scope":"key","concurrency":{"limit":1,"slot_ttl":"30s"}}`,
			`{"scope":"key","concurrency":{"limit":1,"slot_ttl":"30s"}}`},
		{"api.call", `{"scope":"header:tenant","unordered":true,"token_bucket":{"rate":10,"burst":10}}`,
			`{"scope":"header:tenant","unordered":true,"token_bucket":{"rate":10,"burst":10,"reserve":0,"min_priority":0}}`},
		{"mail", `{"scope":"type","window_quota":{"limit":5,"window":"1s"}}`,
			`{"scope":"type","window_quota":{"limit":5,"window":"1s"}}`},
	} {
		r := e.do(t, "PUT", "/v1/limits/"+c.typ, "application/json", strings.NewReader(c.body))
		var v viewAnswer
		r.decode(t, &v)
		if r.status != 200 || string(v.Rule) != c.want || v.Usage == nil {
			t.Fatalf("PUT %s: %d %s", c.body, r.status, r.body)
		}
		if stored, _ := e.raw(t, c.typ); stored != c.want {
			t.Fatalf("stored %s, want %s", stored, c.want)
		}
		r = e.do(t, "GET", "/v1/limits/"+c.typ, "", nil)
		if r.decode(t, &v); r.status != 200 || string(v.Rule) != c.want {
			t.Fatalf("GET %s: %d %s", c.typ, r.status, r.body)
		}
	}
	r := e.do(t, "GET", "/v1/limits", "", nil)
	var list api.Limits
	if r.decode(t, &list); r.status != 200 || len(list.Limits) != 3 || list.Limits[0].Rule.Scope != "header:tenant" || !list.Limits[0].Rule.Unordered {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	before, rev := e.raw(t, "order.pay")
	for _, bad := range []string{
		`{"scope":"header:","concurrency":{"limit":1}}`,
		`{"scope":"tenant","concurrency":{"limit":1}}`,
		`{"scope":"header:dq-x","concurrency":{"limit":1}}`,
		`{"scope":"header:DQ-id","concurrency":{"limit":1}}`,
		`{"scope":"Key","concurrency":{"limit":1}}`,
		`{"scope":"header:` + strings.Repeat("h", 257) + `","concurrency":{"limit":1}}`,
		`{"scope":"header:a b","concurrency":{"limit":1}}`,
		`{"scope":5,"concurrency":{"limit":1}}`,
	} {
		r := e.do(t, "PUT", "/v1/limits/order.pay", "application/json", strings.NewReader(bad))
		var ea errAnswer
		r.decode(t, &ea)
		if r.status != 422 || ea.Error.Code != "invalid_rule" || !strings.HasPrefix(ea.Error.Message, "scope: ") {
			t.Errorf("PUT %.80s: %d %s, want 422 invalid_rule naming scope", bad, r.status, r.body)
		}
	}
	// unordered means nothing without a key or header scope
	for _, bad := range []string{`{"unordered":true,"concurrency":{"limit":1}}`, `{"scope":"type","unordered":true,"concurrency":{"limit":1}}`} {
		r := e.do(t, "PUT", "/v1/limits/order.pay", "application/json", strings.NewReader(bad))
		var ea errAnswer
		r.decode(t, &ea)
		if r.status != 422 || ea.Error.Code != "invalid_rule" || !strings.HasPrefix(ea.Error.Message, "unordered: ") {
			t.Errorf("PUT %s: %d %s, want 422 invalid_rule naming unordered", bad, r.status, r.body)
		}
	}
	if after, arev := e.raw(t, "order.pay"); after != before || arev != rev {
		t.Fatalf("stored rule changed: %s (rev %d) -> %s (rev %d)", before, rev, after, arev)
	}
}

// GET /v1/limits/{type} and GET /v1/limits show a keyed rule's active
// values and its busiest ones, as a worker's limiter left them in Redis.
func TestLimitsKeysUsage(t *testing.T) {
	e := newAPIEnv(t, nil)
	const body = `{"scope":"header:tenant","concurrency":{"limit":2,"slot_ttl":"30s"}}`
	if r := e.do(t, "PUT", "/v1/limits/render", "application/json", strings.NewReader(body)); r.status != 200 {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	rule, _, err := e.rules.Get(t.Context(), "render")
	if err != nil {
		t.Fatal(err)
	}
	worker, err := ratelimit.NewLimiter(e.rdb, ratelimit.StaticRules{"render": rule}, ratelimit.Options{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	// acme: 3 tasks (2 run, 1 waits), globex: 1, and 1 without the header
	now := time.Now()
	var items []ratelimit.Item
	for i, tenant := range []string{"acme", "acme", "acme", "globex", ""} {
		it := ratelimit.Item{ID: fmt.Sprintf("r-%d", i), Type: "render", Due: now.Add(time.Duration(i) * time.Millisecond)}
		if tenant != "" {
			it.Headers = map[string]string{"tenant": tenant}
		}
		items = append(items, it)
	}
	if _, err := worker.Admit(t.Context(), items); err != nil {
		t.Fatal(err)
	}
	var one api.TypeLimit
	r := e.do(t, "GET", "/v1/limits/render", "", nil)
	r.decode(t, &one)
	var list api.Limits
	rl := e.do(t, "GET", "/v1/limits", "", nil)
	rl.decode(t, &list)
	for _, u := range []*api.LimitUsage{one.Usage, list.Limits[0].Usage} {
		if u == nil || u.ActiveKeys != 3 || u.Running != 4 || len(u.Keys) != 3 {
			t.Fatalf("usage: %s / %s", r.body, rl.body)
		}
		if k := u.Keys[0]; k.Key != "acme" || k.Running != 2 || k.Waiting != 1 {
			t.Fatalf("busiest key: %+v in %s", k, r.body)
		}
	}
	strictRoundTrip(t, r.body, new(api.TypeLimit)) // the keys' wire shape is api.KeyUsage's, byte for byte
	strictRoundTrip(t, rl.body, new(api.Limits))
}

// The limit schemas of api/openapi.yaml name exactly the JSON fields of
// the wire types the daemon writes (api.LimitRule, LimitUsage, KeyUsage).
func TestOpenAPILimitSchemas(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]yaml.Node `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for schema, v := range map[string]any{"Rule": api.LimitRule{}, "Usage": api.LimitUsage{}, "KeyUsage": api.KeyUsage{}} {
		var fields []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		documented := slices.Sorted(maps.Keys(doc.Components.Schemas[schema].Properties))
		if slices.Sort(fields); !slices.Equal(documented, fields) {
			t.Errorf("schema %s documents %q, %T has %q", schema, documented, v, fields)
		}
	}
}
