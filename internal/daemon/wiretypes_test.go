package daemon

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/client"
)

// The answers the Go client decodes are package api's types, declared
// once. strictRoundTrip holds the daemon to them: an answer decodes into
// the api type without a field the type lacks, and the type writes it
// back byte for byte (no field the daemon leaves out, no other name,
// order or format), so the daemon's answer and the client's type cannot
// drift apart.
func strictRoundTrip(t testing.TB, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T strictly: %v: %s", v, err, raw)
	}
	back, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	back = append(back, '\n')
	if !bytes.Equal(back, raw) {
		t.Fatalf("%T writes the answer back otherwise:\ndaemon: %s\napi:    %s", v, raw, back)
	}
}

// TestWireTypesShared: GET /v1/limits, /v1/limits/{type}, /v1/shards and
// /v1/cluster against the api types (clusterOf also checks /v1/cluster
// in TestClusterEndpoint, with leaders and processes).
func TestWireTypesShared(t *testing.T) {
	_, _, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)
	rules := []string{
		`{"window_quota":{"limit":600,"window":"10s"}}`,
		`{"token_bucket":{"rate":0.5,"burst":1},"concurrency":{"limit":5}}`,
		`{"token_bucket":{"rate":200,"burst":50,"reserve":10,"min_priority":5},"concurrency":{"limit":5,"slot_ttl":"30s"}}`,
		`{"scope":"header:tenant","unordered":true,"concurrency":{"limit":1}}`,
	}
	for i, rule := range rules {
		typ := []string{"mail", "render", "api.call", "per.tenant"}[i]
		put := app.do("PUT", "/v1/limits/"+typ, rule)
		if put.Status != http.StatusOK {
			t.Fatalf("put %s: %d %s", typ, put.Status, put.Raw)
		}
		strictRoundTrip(t, put.Raw, new(api.TypeLimit))
		strictRoundTrip(t, app.do("GET", "/v1/limits/"+typ, "").Raw, new(api.TypeLimit))
	}
	var all api.Limits
	strictRoundTrip(t, app.do("GET", "/v1/limits", "").Raw, &all)
	if len(all.Limits) != len(rules) {
		t.Fatalf("limits: %+v", all)
	}
	strictRoundTrip(t, app.do("DELETE", "/v1/limits/mail", "").Raw, new(api.LimitDeleted))

	var m api.ShardMap
	strictRoundTrip(t, app.do("GET", "/v1/shards", "").Raw, &m)
	if m.Count != cfg.Shards || m.State != api.ShardsStable {
		t.Fatalf("shards: %+v", m)
	}
	c := app.clusterOf()
	if c.Namespace != cfg.Namespace || len(c.Shards) != cfg.Shards {
		t.Fatalf("cluster: %+v", c)
	}
	var f api.ForgottenTopic
	strictRoundTrip(t, app.do("DELETE", "/v1/cluster/worked/orders", "").Raw, &f)
	if f.Topic != "orders" || f.Forgotten {
		t.Fatalf("forget: %+v", f)
	}
}

// strictDecode decodes an answer into v without a field v lacks.
func strictDecode(t testing.TB, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T strictly: %v: %s", v, err, raw)
	}
}

// TestWireShapesOfClientTypes: the answers the daemon writes by hand (a
// task's JSON keeps its payload byte for byte; no encoding/json on the
// hot path) and the other answers package client reads hold no field the
// client's types lack.
func TestWireShapesOfClientTypes(t *testing.T) {
	_, _, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)
	due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, id := range []string{"w-1", "w-2"} {
		body := `{"id":"` + id + `","type":"shape","topic":"orders","key":"k","headers":{"h":"v"},"payload":{"n":1},"due_at":"` + due +
			`","max_attempts":3,"timeout":"30s","priority":2}`
		if r := app.do("POST", "/v1/tasks", body); r.Status != http.StatusCreated {
			t.Fatalf("schedule %s: %d %s", id, r.Status, r.Raw)
		}
	}
	var ti client.TaskInfo
	strictDecode(t, app.do("GET", "/v1/tasks/w-1", "").Raw, &ti)
	if ti.ID != "w-1" || ti.Topic != "orders" || time.Duration(ti.Timeout) != 30*time.Second || string(ti.Payload) != `{"n":1}` {
		t.Fatalf("task: %+v", ti)
	}
	var page client.TaskPage
	strictDecode(t, app.do("GET", "/v1/tasks?type=shape", "").Raw, &page)
	if len(page.Tasks) != 2 {
		t.Fatalf("list: %+v", page)
	}
	var dead struct {
		Dead []client.DeadTask `json:"dead"`
	}
	strictDecode(t, app.do("GET", "/v1/dead", "").Raw, &dead)
	var bulk struct {
		Changed int  `json:"changed"`
		More    bool `json:"more"`
	}
	strictDecode(t, app.do("POST", "/v1/tasks/cancel", `{"ids":["w-2"]}`).Raw, &bulk)
	if bulk.Changed != 1 {
		t.Fatalf("bulk cancel: %+v", bulk)
	}
	if r := app.do("PUT", "/v1/limits/shape", `{"concurrency":{"limit":2}}`); r.Status != http.StatusOK {
		t.Fatalf("limit: %d %s", r.Status, r.Raw)
	}
	var ts client.TypeState
	strictDecode(t, app.do("POST", "/v1/types/shape/pause", "").Raw, &ts)
	if !ts.Paused || !ts.Changed {
		t.Fatalf("pause: %+v", ts)
	}
	var types struct {
		Types []client.TypeInfo `json:"types"`
	}
	strictDecode(t, app.do("GET", "/v1/types", "").Raw, &types)
	if len(types.Types) != 1 || !types.Types[0].Paused || types.Types[0].PausedAt.IsZero() || types.Types[0].Limit == nil {
		t.Fatalf("types: %+v", types)
	}
	strictDecode(t, app.do("POST", "/v1/types/shape/resume", "").Raw, &ts)
	if ts.Paused || !ts.Changed {
		t.Fatalf("resume: %+v", ts)
	}
}
