package daemon

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/task"
)

// The OpenAPI document (api/openapi.yaml) against the real router:
//
//   - TestOpenAPIRoutes: every route routes() registers (read from the
//     source of routes(), admin.MountReport and ratelimit.NewAPI, and
//     checked against the live mux) is documented, and every documented
//     path and method reaches its own handler on the live mux;
//   - statusCoverage (TestMain): every answer the daemon writes during the
//     package's tests is recorded, and after a run of the whole package
//     every documented (operation, status) must have been answered by some
//     test (the "default" response, 500 internal, excepted).

// openAPIDoc is the part of the document the tests read.
type openAPIDoc struct {
	OpenAPI string                          `yaml:"openapi"`
	Paths   map[string]map[string]yaml.Node `yaml:"paths"`
}

type openAPIOperation struct {
	OperationID string               `yaml:"operationId"`
	Responses   map[string]yaml.Node `yaml:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func loadOpenAPI(tb testing.TB) openAPIDoc {
	tb.Helper()
	var doc openAPIDoc
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		tb.Fatalf("api/openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		tb.Fatalf("api/openapi.yaml: openapi %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

// docOp is one documented operation: "GET /v1/tasks/{id}".
type docOp struct{ method, path string }

func (o docOp) String() string { return o.method + " " + o.path }

func (d openAPIDoc) ops() []docOp {
	var out []docOp
	for path, item := range d.Paths {
		for m := range item {
			if slices.Contains(httpMethods, m) {
				out = append(out, docOp{strings.ToUpper(m), path})
			}
		}
	}
	slices.SortFunc(out, func(a, b docOp) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// statuses are an operation's documented status codes ("default" left out).
func (d openAPIDoc) statuses(o docOp) []int {
	var op openAPIOperation
	node := d.Paths[o.path][strings.ToLower(o.method)]
	if err := node.Decode(&op); err != nil {
		return nil
	}
	var out []int
	for code := range op.Responses {
		if n, err := strconv.Atoi(code); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// docMux routes a request to the documented operation it belongs to.
func (d openAPIDoc) docMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, o := range d.ops() {
		p := o.path
		if strings.HasSuffix(p, "/") {
			p += "{$}"
		}
		mux.Handle(o.method+" "+p, http.NotFoundHandler())
	}
	return mux
}

// examplePath fills the path parameters of a documented path.
func examplePath(p string) string {
	return strings.NewReplacer("{id}", "t-1", "{type}", "t.x", "{asset}", "app.js").Replace(p)
}

// --- status coverage, recorded in TestMain ---

type answered struct {
	method, path string
	status       int
}

var answers struct {
	sync.Mutex
	seen map[answered]bool
}

// statusCoverage runs the package's tests with every answer recorded, and
// then (when the whole package ran and passed) fails the run if a
// documented status of an operation was never answered.
type statusCoverage struct{ m *testing.M }

func (s statusCoverage) Run() int {
	answers.seen = make(map[answered]bool)
	// Every request a test sends through an http.Client without a
	// transport of its own (the helpers' clients, package client's
	// default) passes the recorder; a test that serves the handler itself
	// records with serveRecorded.
	http.DefaultTransport = recordingTransport{next: http.DefaultTransport}
	code := s.m.Run()
	if code != 0 || !wholePackage() {
		return code
	}
	if missing := missingStatuses(); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: documented status codes no test produced (api/openapi.yaml):\n\t%s\n", strings.Join(missing, "\n\t"))
		return 1
	}
	return code
}

// recordAnswer notes one answer of the daemon.
func recordAnswer(method, path string, status int) {
	answers.Lock()
	answers.seen[answered{method, path, status}] = true
	answers.Unlock()
}

// recordingTransport records the answer of every request it sends.
type recordingTransport struct{ next http.RoundTripper }

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		recordAnswer(req.Method, req.URL.Path, resp.StatusCode)
	}
	return resp, err
}

// serveRecorded serves req with h into a recorder and records the answer.
func serveRecorded(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	recordAnswer(req.Method, req.URL.Path, w.Code)
	return w
}

// wholePackage reports whether every test of the package ran (no -run,
// -skip, -list, or a shortened run).
func wholePackage() bool {
	for _, name := range []string{"test.run", "test.skip", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return !testing.Short()
}

func missingStatuses() []string {
	var doc openAPIDoc
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		return []string{"api/openapi.yaml: " + err.Error()}
	}
	mux := doc.docMux()
	got := make(map[string]bool)
	answers.Lock()
	for a := range answers.seen {
		req := &http.Request{Method: a.method, Host: "x", URL: &url.URL{Path: a.path}}
		if _, pattern := mux.Handler(req); pattern != "" {
			got[fmt.Sprintf("%s %d", pattern, a.status)] = true
		}
	}
	answers.Unlock()
	var missing []string
	for _, o := range doc.ops() {
		p := o.path
		if strings.HasSuffix(p, "/") {
			p += "{$}"
		}
		for _, st := range doc.statuses(o) {
			if !got[fmt.Sprintf("%s %s %d", o.method, p, st)] {
				missing = append(missing, fmt.Sprintf("%s %d", o, st))
			}
		}
	}
	return missing
}

// --- the routes ---

// registeredPatterns reads the patterns routes() registers from the
// source: its own mux.Handle/HandleFunc calls, admin.MountReport's and
// the limits endpoints' (limitsAPI.mount).
func registeredPatterns(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, src := range []struct{ file, fn string }{
		{"api.go", "routes"},
		{"../admin/report.go", "MountReport"},
		{"limits.go", "mount"},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, src.file, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", src.file, err)
		}
		found := false
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != src.fn {
				continue
			}
			found = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: %s registers a route with a pattern that is not a string literal (at %s)", src.file, src.fn, fset.Position(call.Pos()))
					return true
				}
				s, _ := strconv.Unquote(lit.Value)
				out = append(out, s)
				return true
			})
		}
		if !found {
			t.Fatalf("%s: no func %s", src.file, src.fn)
		}
	}
	return out
}

func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	_, _, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)

	srv, ok := app.handler.(*server)
	if !ok {
		t.Fatalf("the daemon's handler is %T, not *server", app.handler)
	}
	// resolve is the pattern the live router sends a request to.
	resolve := func(method, path string) string {
		_, p := srv.mux.Handler(httptest.NewRequest(method, "http://x"+path, nil))
		return p
	}

	documented := make(map[docOp]bool)
	for _, o := range doc.ops() {
		documented[o] = true
		// Every documented operation reaches a handler of its own: a
		// pattern with its method and its path (or a subtree above it).
		p := resolve(o.method, examplePath(o.path))
		pm, pp, ok := strings.Cut(p, " ")
		if !ok {
			t.Errorf("%s: routed to %q, a pattern without a method (a fallback), not an endpoint", o, p)
			continue
		}
		pp = strings.TrimSuffix(pp, "{$}")
		if pm != o.method || (pp != o.path && (!strings.HasSuffix(pp, "/") || !strings.HasPrefix(o.path, pp))) {
			t.Errorf("%s: routed to %q", o, p)
		}
		if len(doc.statuses(o)) == 0 {
			t.Errorf("%s: documents no status code", o)
		}
		if strings.HasPrefix(o.path, "/v1/") && !slices.Contains(doc.statuses(o), http.StatusUnauthorized) {
			t.Errorf("%s: a /v1 endpoint that does not document 401", o)
		}
	}

	pats := registeredPatterns(t)
	if len(pats) < 20 {
		t.Fatalf("read only %d route patterns from the source: %q", len(pats), pats)
	}
	for _, p := range pats {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			// A method-less pattern: the catch-all 404, a mount or a 405
			// fallback; documented when some operation lives under it.
			if p == "/" {
				continue
			}
			under := false
			for o := range documented {
				under = under || o.path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(o.path, p))
			}
			if !under {
				t.Errorf("route %q: no documented operation under it", p)
			}
			continue
		}
		// The source's pattern is the live router's.
		if got := resolve(method, examplePath(path)); got != p {
			t.Errorf("route %q (read from the source): the live router sends %s %s to %q", p, method, examplePath(path), got)
		}
		dp := strings.TrimSuffix(path, "{$}")
		if !documented[docOp{method, dp}] {
			t.Errorf("route %q is not documented in api/openapi.yaml", p)
		}
	}
}

// TestOpenAPIServed: GET /v1/openapi.yaml answers the document, behind
// the token.
func TestOpenAPIServed(t *testing.T) {
	r := startRedis(t)
	cfg := testConfig(t, r.Addr)
	cfg.APIToken = "tok"
	app := startApp(t, cfg)
	if got := app.doHeader("GET", "/v1/openapi.yaml", "", http.Header{}); got.Status != http.StatusUnauthorized {
		t.Fatalf("without token: %d", got.Status)
	}
	req, _ := http.NewRequest("GET", app.base+"/v1/openapi.yaml", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || string(b) != string(api.OpenAPI) {
		t.Fatalf("openapi.yaml: %d %q, %d bytes (want %d)", resp.StatusCode, resp.Header.Get("Content-Type"), len(b), len(api.OpenAPI))
	}
}

// TestOpenAPIStatuses answers the documented statuses that the other
// tests of the package do not: 401 on every /v1 operation, the console's
// assets, the limits and shard endpoints' errors, and 503 from each
// endpoint that needs Redis or etcd while it is missing.
func TestOpenAPIStatuses(t *testing.T) {
	doc := loadOpenAPI(t)
	_, e, cfg := startRedisEtcd(t)
	cfg.APIToken = "tok"
	cfg.MaxBody = 4 << 10
	cfg.Shards = 2
	app := startApp(t, cfg)
	// The namespace's shard map, as its first event process creates it.
	if _, err := (shardmap.Etcd{Client: e.Client(t), Namespace: cfg.Namespace}).Ensure(t.Context(), shardmap.Initial(cfg.Shards)); err != nil {
		t.Fatal(err)
	}

	type tc struct {
		method, path, body, ct string
		header                 http.Header
		status                 int
	}
	run := func(a *testApp, cases []tc) {
		t.Helper()
		for _, c := range cases {
			h := http.Header{}
			for k, v := range c.header {
				h[k] = v
			}
			if a.token != "" && h.Get("Authorization") == "" {
				h.Set("Authorization", "Bearer "+a.token)
			}
			if c.body != "" || c.ct != "" || c.method != "GET" { // writes say JSON, body or not
				h.Set("Content-Type", cmp.Or(c.ct, "application/json"))
			}
			if got := a.doHeader(c.method, c.path, c.body, h); got.Status != c.status {
				t.Errorf("%s %s: %d %s, want %d", c.method, c.path, got.Status, task.Truncate(string(got.Raw), 200), c.status)
			}
		}
	}

	// 401 without the token (or with a wrong one) on every /v1 operation.
	var cases []tc
	for i, o := range doc.ops() {
		if strings.HasPrefix(o.path, "/v1/") {
			auth := http.Header{"Authorization": {"Bearer nope"}}
			if i%2 == 0 {
				auth = http.Header{"Authorization": {"Basic dG9rOg=="}}
			}
			cases = append(cases, tc{method: o.method, path: examplePath(o.path), header: auth, status: 401})
		}
	}
	// The console: no token needed; ETags.
	index := app.doHeader("GET", "/ui/", "", http.Header{})
	js := app.doHeader("GET", "/ui/app.js", "", http.Header{})
	if index.Status != 200 || js.Status != 200 {
		t.Fatalf("console: %d, %d", index.Status, js.Status)
	}
	etag := func(path string) string {
		resp, err := httpClient.Get(app.base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("ETag")
	}
	big := `{"window_quota":{"limit":1,"window":"1s"},"x":"` + strings.Repeat("a", 5<<10) + `"}`
	cases = append(cases,
		tc{method: "GET", path: "/ui/", header: http.Header{"If-None-Match": {etag("/ui/")}}, status: 304},
		tc{method: "GET", path: "/ui/app.js", header: http.Header{"If-None-Match": {etag("/ui/app.js")}}, status: 304},
		tc{method: "GET", path: "/ui/nope.js", status: 404},
		// limits
		tc{method: "GET", path: "/v1/limits", status: 200},
		tc{method: "GET", path: "/v1/limits/a%20b", status: 422},
		tc{method: "DELETE", path: "/v1/limits/a%20b", status: 422},
		tc{method: "DELETE", path: "/v1/limits/none", status: 404},
		tc{method: "PUT", path: "/v1/limits/x", body: `{"window_quota":`, status: 400},
		tc{method: "PUT", path: "/v1/limits/x", body: `{}`, ct: "text/plain", status: 415},
		tc{method: "PUT", path: "/v1/limits/x", body: big, status: 413},
		// shards
		tc{method: "GET", path: "/v1/shards", status: 200},
		tc{method: "PUT", path: "/v1/shards", body: `{"count":`, status: 400},
		tc{method: "PUT", path: "/v1/shards", body: `{"count":4}`, ct: "text/plain", status: 415},
		tc{method: "PUT", path: "/v1/shards", body: `{"count":4,"x":"` + strings.Repeat("a", 5<<10) + `"}`, status: 413},
		tc{method: "PUT", path: "/v1/shards", body: `{"count":3}`, status: 422},
		tc{method: "PUT", path: "/v1/shards", body: `{"count":4}`, status: 202},
		tc{method: "PUT", path: "/v1/shards", body: `{"count":8}`, status: 409}, // the growth to 4 still moves tasks
		// bad ids in the path, an oversize bulk
		tc{method: "DELETE", path: "/v1/dead/a%20b", status: 422},
		tc{method: "POST", path: "/v1/dead/a%0Ab/redrive", status: 422},
		tc{method: "POST", path: "/v1/dead/redrive", body: `{"ids":["` + strings.Repeat("a", 5<<10) + `"]}`, status: 413},
	)
	run(app, cases)

	// Without etcd: the limits and a growth answer 503.
	r2 := startRedis(t)
	cfg2 := testConfig(t, r2.Addr)
	noEtcd := startApp(t, cfg2)
	run(noEtcd, []tc{
		{method: "GET", path: "/v1/limits/x", status: 503},
		{method: "PUT", path: "/v1/limits/x", body: `{"concurrency":{"limit":1}}`, status: 503},
		{method: "DELETE", path: "/v1/limits/x", status: 503},
		{method: "PUT", path: "/v1/shards", body: `{"count":4}`, status: 503},
	})
	// Redis down: everything that reads or changes tasks answers 503.
	r2.Kill(t)
	waitFor(t, "the daemon to see redis down", func() bool { return !noEtcd.stats().RedisUp })
	run(noEtcd, []tc{
		{method: "GET", path: "/v1/tasks", status: 503},
		{method: "POST", path: "/v1/tasks/cancel", body: `{"filter":{}}`, status: 503},
		{method: "POST", path: "/v1/dead/redrive", body: `{"ids":["a"]}`, status: 503},
		{method: "DELETE", path: "/v1/dead", body: `{"filter":{}}`, status: 503},
		{method: "DELETE", path: "/v1/dead/a", status: 503},
		{method: "POST", path: "/v1/dead/a/redrive", status: 503},
		{method: "GET", path: "/v1/shards", status: 503},
	})
}
