package daemon

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/worked"
)

// TestClusterWorkedTopics: GET /v1/cluster lists the worked topics (an
// empty list when there are none); DELETE /v1/cluster/worked/{topic}
// forgets one (forgotten false when it was not worked), refuses a bad
// name with 422 naming topic and writes nothing then.
func TestClusterWorkedTopics(t *testing.T) {
	_, e, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)
	cli := e.Client(t)
	ctx := t.Context()
	ns := cfg.Namespace

	if raw := string(app.do("GET", "/v1/cluster", "").Raw); !strings.Contains(raw, `"worked_topics":[]`) {
		t.Fatalf("no worked topics: %s", raw)
	}
	for _, d := range []struct{ topic, group, by string }{{"dq.tasks", "dq-workers", "work-1"}, {"billing", "billing-g", "work-2"}} {
		if _, err := worked.Declare(ctx, cli, ns, d.topic, d.group, d.by); err != nil {
			t.Fatal(err)
		}
	}
	c := app.clusterOf()
	if len(c.WorkedTopics) != 2 || c.EtcdError != "" {
		t.Fatalf("worked topics: %+v (etcd error %q)", c.WorkedTopics, c.EtcdError)
	}
	if b, d := c.WorkedTopics[0], c.WorkedTopics[1]; b.Topic != "billing" || b.Group != "billing-g" || b.By != "work-2" || b.Since.IsZero() ||
		d.Topic != "dq.tasks" || d.Group != "dq-workers" || d.By != "work-1" {
		t.Fatalf("worked topics: %+v", c.WorkedTopics)
	}
	raw := string(app.do("GET", "/v1/cluster", "").Raw)
	if !regexp.MustCompile(`"worked_topics":\[\{"topic":"billing","group":"billing-g","since":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z","by":"work-2"\}`).MatchString(raw) {
		t.Fatalf("worked topics as JSON: %s", raw)
	}

	// bad names: 422 naming topic, nothing written (the worked prefix
	// compared key by key: the process registry writes to etcd on its own)
	workedKeys := func() string {
		t.Helper()
		r, err := cli.Get(ctx, worked.Prefix(ns), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, kv := range r.Kvs {
			fmt.Fprintf(&b, "%s@%d=%s\n", kv.Key, kv.ModRevision, kv.Value)
		}
		return b.String()
	}
	before := workedKeys()
	for _, p := range []string{"a%20b", "a:b", "%2E%2E", "%2E", "a%2Fb", "caf%C3%A9", strings.Repeat("x", 250)} {
		r := app.do("DELETE", "/v1/cluster/worked/"+p, "")
		if r.Status != 422 || r.errCode() != "invalid_task" || !strings.HasPrefix(r.errMessage(), "topic: ") {
			t.Errorf("DELETE /v1/cluster/worked/%.30s: %d %s, want 422 naming topic", p, r.Status, r.Raw)
		}
	}
	if after := workedKeys(); after != before {
		t.Fatalf("refused deletes changed the worked topics:\n%s->\n%s", before, after)
	}

	r := app.do("DELETE", "/v1/cluster/worked/dq.tasks", "")
	if r.Status != 200 || r.JSON["forgotten"] != true || r.str("topic") != "dq.tasks" || len(r.JSON) != 2 {
		t.Fatalf("forget: %d %s", r.Status, r.Raw)
	}
	if r := app.do("DELETE", "/v1/cluster/worked/dq.tasks", ""); r.Status != 200 || r.JSON["forgotten"] != false || r.str("topic") != "dq.tasks" {
		t.Fatalf("forget again: %d %s", r.Status, r.Raw)
	}
	if c := app.clusterOf(); len(c.WorkedTopics) != 1 || c.WorkedTopics[0].Topic != "billing" {
		t.Fatalf("after forgetting dq.tasks: %+v", c.WorkedTopics)
	}
	if got, err := worked.List(ctx, cli, ns); err != nil || len(got) != 1 {
		t.Fatalf("etcd after the forget: %+v %v", got, err)
	}

	// etcd down: 503, never a 4xx; the cluster names etcd
	e.Stop(t)
	if r := app.do("DELETE", "/v1/cluster/worked/billing", ""); r.Status != 503 || r.errCode() != "unavailable" || !strings.Contains(r.errMessage(), "etcd") {
		t.Fatalf("forget with etcd down: %d %s", r.Status, r.Raw)
	}
	if c := app.clusterOf(); c.EtcdError == "" || c.WorkedTopics == nil {
		t.Fatalf("cluster with etcd down: %+v", c)
	}
}

// Without etcd: the cluster lists no worked topics ([]), a forget answers
// 503 naming DQ_ETCD_ENDPOINTS; a bad name is still 422.
func TestForgetWorkedTopicWithoutEtcd(t *testing.T) {
	app := startApp(t, testConfig(t, startRedis(t).Addr))
	if raw := string(app.do("GET", "/v1/cluster", "").Raw); !strings.Contains(raw, `"worked_topics":[]`) {
		t.Fatalf("cluster without etcd: %s", raw)
	}
	if r := app.do("DELETE", "/v1/cluster/worked/dq.tasks", ""); r.Status != 503 || !strings.Contains(r.errMessage(), "DQ_ETCD_ENDPOINTS") {
		t.Fatalf("forget without etcd: %d %s", r.Status, r.Raw)
	}
	if r := app.do("DELETE", "/v1/cluster/worked/a%20b", ""); r.Status != 422 {
		t.Fatalf("bad name without etcd: %d %s", r.Status, r.Raw)
	}
}
