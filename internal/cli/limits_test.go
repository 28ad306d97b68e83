package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/testenv"
)

// TestLimitsSetScopeBody: --scope and --unordered travel in the body of
// PUT /v1/limits/{type} as "scope" and "unordered"; with RULES-JSON they
// are refused (the JSON is sent as written).
func TestLimitsSetScopeBody(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+b.String())
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"type":"order.pay","rule":%s,"usage":null}`, b.String())
	}))
	defer srv.Close()
	env := map[string]string{"DQ_ADDR": srv.URL}
	for _, tc := range []struct {
		args []string
		body string
		out  string // a line of the text answer
	}{
		{[]string{"--concurrency", "1", "--slot-ttl", "30s", "--scope", "key"},
			`{"scope":"key","concurrency":{"limit":1,"slot_ttl":"30s"}}`,
			`(?m)^order\.pay\s+per key: 1 running\s+-$`},
		{[]string{"--rate", "10", "--scope", "header:tenant", "--unordered"},
			`{"scope":"header:tenant","unordered":true,"token_bucket":{"rate":10,"burst":0,"reserve":0,"min_priority":0}}`,
			`(?m)^order\.pay\s+per header:tenant \(unordered\): 10/s burst 0\s+-$`},
		{[]string{"--quota", "5", "--window", "1s"}, // no scope: the type's, as before
			`{"window_quota":{"limit":5,"window":"1s"}}`,
			`(?m)^order\.pay\s+5 per 1s\s+-$`},
	} {
		got = nil
		args := append([]string{"limits", "set", "order.pay"}, tc.args...)
		out, _, err := runDQ(t, env, args...)
		if err != nil || len(got) != 1 || got[0] != "PUT /v1/limits/order.pay "+tc.body || !regexp.MustCompile(tc.out).MatchString(out) {
			t.Errorf("dq %s: sent %q, printed %q, %v", strings.Join(args, " "), got, out, err)
		}
	}
	got = nil
	_, _, err := runDQ(t, env, "limits", "set", "order.pay", `{"concurrency":{"limit":1}}`, "--scope", "key")
	if err == nil || !strings.Contains(err.Error(), "RULES-JSON") || len(got) != 0 {
		t.Errorf("--scope with RULES-JSON: sent %q, %v", got, err)
	}
}

// TestLimitsKeysTable: a keyed rule prints its scope before its rules,
// its active values and sums as usage, and its busiest values as a short
// table (odd values quoted and cut); a type-wide rule prints as before.
func TestLimitsKeysTable(t *testing.T) {
	ls := []api.TypeLimit{
		{Type: "mail", Rule: api.LimitRule{Concurrency: &api.Concurrency{Limit: 5}},
			Usage: &api.LimitUsage{Running: 2}},
		{Type: "order.pay", Rule: api.LimitRule{Scope: "key", Concurrency: &api.Concurrency{Limit: 1}, WindowQuota: &api.WindowQuota{Limit: 10, Window: api.Duration(60e9)}},
			Usage: &api.LimitUsage{Running: 3, WindowCount: 7, ActiveKeys: 12, Keys: []api.KeyUsage{
				{Key: "o-17", Running: 1, Waiting: 4, WindowCount: 5},
				{Key: "", Running: 1, WindowCount: 1},
				{Key: "a b\tc", Running: 1, WindowCount: 1},
				{Key: strings.Repeat("k", 100), Waiting: 1},
			}}},
	}
	var out bytes.Buffer
	if err := printLimits(&out, ls); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, re := range []string{
		`(?m)^mail\s+5 running\s+running 2/5$`,
		`(?m)^order\.pay\s+per key: 10 per 1m0s, 1 running\s+12 active, running 3, window 7$`,
		`(?m)^busiest values of order\.pay \(key; 4 of 12 active\):$`,
		`(?m)^  VALUE\s+RUNNING\s+WAITING\s+WINDOW\s+TOKENS$`,
		`(?m)^  o-17\s+1/1\s+4\s+5/10\s+-$`,
		`(?m)^  ""\s+1/1\s+0\s+1/10\s+-$`,
		`(?m)^  "a b\\tc"\s+1/1\s+0\s+1/10\s+-$`,
		`(?m)^  k{48}…\s+0/1\s+1\s+0/10\s+-$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("no line %s in\n%s", re, s)
		}
	}
	if strings.Count(s, "busiest values") != 1 {
		t.Errorf("a keys table for a type-wide rule:\n%s", s)
	}
}

// TestLimitsCommandScope: dq limits set --scope through the real daemon
// (rules in etcd): get and list show the scope; a scope the daemon
// refuses is its 422 naming "scope"; once a worker's limiter admitted
// tasks of several keys, get lists the busiest of them.
func TestLimitsCommandScope(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	base, r, ns := startDaemonNS(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	out, _, err := runDQ(t, env, "limits", "set", "order.pay", "--concurrency", "1", "--scope", "key", "-o", "json")
	if err != nil || !strings.Contains(out, `"scope": "key"`) {
		t.Fatalf("limits set --scope key: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "limits", "set", "api.call", "--rate", "5", "--scope", "header:tenant", "--unordered"); err != nil ||
		!regexp.MustCompile(`(?m)^api\.call\s+per header:tenant \(unordered\): 5/s burst 5\s+0 active$`).MatchString(out) {
		t.Fatalf("limits set --scope header:tenant: %q, %v", out, err)
	}
	for _, bad := range []string{"tenant", "header:", "header:dq-x"} {
		_, _, err := runDQ(t, env, "limits", "set", "order.pay", "--concurrency", "1", "--scope", bad)
		if err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "scope") {
			t.Errorf("--scope %q: %v, want the daemon's 422 naming scope", bad, err)
		}
	}

	// A worker admits 3 tasks of key k1 and one of k2: k1 runs one and
	// keeps two waiting, k2 runs one.
	rule, ok, err := mustRules(t, etcd, ns).Get(t.Context(), "order.pay")
	if err != nil || !ok {
		t.Fatalf("rule: %v %v", ok, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	lim, err := ratelimit.NewLimiter(rdb, ratelimit.StaticRules{"order.pay": rule}, ratelimit.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	items := []ratelimit.Item{
		{ID: "t1", Type: "order.pay", Key: "k1"}, {ID: "t2", Type: "order.pay", Key: "k1"},
		{ID: "t3", Type: "order.pay", Key: "k1"}, {ID: "t4", Type: "order.pay", Key: "k2"},
	}
	if _, err := lim.Admit(t.Context(), items); err != nil {
		t.Fatal(err)
	}
	out, _, err = runDQ(t, env, "limits", "get", "order.pay")
	if err != nil || !regexp.MustCompile(`(?m)^order\.pay\s+per key: 1 running\s+2 active, running 2$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  k1\s+1/1\s+\d+\s+-\s+-$`).MatchString(out) || !regexp.MustCompile(`(?m)^  k2\s+1/1\s+0\s+-\s+-$`).MatchString(out) {
		t.Fatalf("limits get of a keyed rule: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "limits", "get", "order.pay", "-o", "json")
	var l api.TypeLimit
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || l.Usage == nil || l.Usage.ActiveKeys != 2 || len(l.Usage.Keys) != 2 {
		t.Fatalf("limits get -o json: %q, %v", out, err)
	}
}

func mustRules(t *testing.T, etcd *testenv.Etcd, ns string) *ratelimit.Rules {
	t.Helper()
	rules, err := ratelimit.NewRules(etcd.Client(t), ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}
