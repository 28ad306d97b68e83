package cli

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/worked"
)

// TestClusterCommand: dq cluster shows every shard with its backlog and
// the overdue tasks, in text and as the daemon's JSON.
func TestClusterCommand(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	base, _ := startDaemon(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	scheduleTasks(t, base, "late", "t", 3, time.Now().Add(-2*time.Minute))
	scheduleTasks(t, base, "soon", "t", 4, time.Now().Add(time.Hour))

	out, _, err := runDQ(t, env, "cluster")
	if err != nil || !strings.Contains(out, "16 shards, redis up, journal 0") || !strings.Contains(out, "pending 7, overdue 3 (oldest 2m") ||
		!strings.Contains(out, "SHARD  LEADER") || !strings.Contains(out, "OLDEST OVERDUE") || strings.Contains(out, "etcd:") {
		t.Fatalf("dq cluster: %q, %v", out, err)
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 10 && f[0] != "SHARD" {
			rows++
		}
	}
	if rows != 16 {
		t.Errorf("%d shard rows, want 16: %q", rows, out)
	}

	out, _, err = runDQ(t, env, "cluster", "-o", "json")
	var cl client.Cluster
	if err != nil || json.Unmarshal([]byte(out), &cl) != nil || cl.ShardCount != 16 || len(cl.Shards) != 16 || !cl.RedisUp {
		t.Fatalf("dq cluster -o json: %q, %v", out, err)
	}
	if len(cl.WorkedTopics) != 0 || !strings.Contains(out, `"worked_topics": []`) {
		t.Errorf("dq cluster -o json without worked topics: %q", out)
	}
	for _, bad := range [][]string{{"x"}, {"-o", "yaml"}, {"--limit", "1"}, {"forget-topic"}, {"forget-topic", "a", "b"}} {
		if _, _, err := runDQ(t, env, append([]string{"cluster"}, bad...)...); err == nil || errors.As(err, new(*client.APIError)) {
			t.Errorf("dq cluster %q: %v, want an error before any request", bad, err)
		}
	}
}

// TestClusterWorkedTopicsCommand: dq cluster lists the worked topics;
// dq cluster forget-topic forgets one (and says when it was not worked),
// in text and JSON; a bad name is the daemon's 422.
func TestClusterWorkedTopicsCommand(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	base, _, ns := startDaemonNS(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	out, _, err := runDQ(t, env, "cluster")
	if err != nil || !strings.Contains(out, "no worked topics") {
		t.Fatalf("dq cluster without worked topics: %q, %v", out, err)
	}
	cli := etcd.Client(t)
	for _, topic := range []string{"dq.tasks", "billing"} {
		if _, err := worked.Declare(t.Context(), cli, ns, topic, "g-"+topic, "work-1"); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err = runDQ(t, env, "cluster")
	_, tail, found := strings.Cut(out, "WORKED TOPIC")
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	if err != nil || !found || len(lines) != 3 || strings.Fields(lines[0])[0] != "GROUP" {
		t.Fatalf("dq cluster: %q, %v", out, err)
	}
	for i, want := range []string{"billing g-billing", "dq.tasks g-dq.tasks"} {
		f := strings.Fields(lines[i+1])
		if len(f) != 3 || f[0]+" "+f[1] != want || !strings.HasPrefix(f[2], "20") || !strings.HasSuffix(f[2], "Z") {
			t.Errorf("worked topic row %q, want %s and its time", lines[i+1], want)
		}
	}

	out, _, err = runDQ(t, env, "cluster", "forget-topic", "dq.tasks")
	if err != nil || out != "dq.tasks forgotten: its tasks fired from now on end delivered, unless a work process declares it again\n" {
		t.Fatalf("dq cluster forget-topic: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "cluster", "forget-topic", "dq.tasks", "-o", "json")
	if err != nil || strings.Join(strings.Fields(out), "") != `{"topic":"dq.tasks","forgotten":false}` {
		t.Fatalf("dq cluster forget-topic -o json: %q, %v", out, err)
	}
	if out, _, err := runDQ(t, env, "cluster", "forget-topic", "billing", "-o", "text"); err != nil || !strings.Contains(out, "billing forgotten") {
		t.Fatalf("dq cluster forget-topic billing: %q, %v", out, err)
	}
	if out, _, err := runDQ(t, env, "cluster", "forget-topic", "billing"); err != nil || out != "billing was not a worked topic\n" {
		t.Fatalf("dq cluster forget-topic of a forgotten topic: %q, %v", out, err)
	}
	var ae *client.APIError
	if _, _, err := runDQ(t, env, "cluster", "forget-topic", "a b"); !errors.As(err, &ae) || ae.Status != 422 || !strings.HasPrefix(ae.Message, "topic:") {
		t.Fatalf("dq cluster forget-topic of a bad name: %v", err)
	}
	if out, _, err := runDQ(t, env, "cluster"); err != nil || !strings.Contains(out, "no worked topics") {
		t.Fatalf("dq cluster after the forgets: %q, %v", out, err)
	}
}

// TestPrintCluster: the table names a shard without a leader, the oldest
// overdue age, a process that is not ready with its reason, and what the
// daemon could not read.
func TestPrintCluster(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	cl := &client.Cluster{
		Namespace: "prod", ShardCount: 2, JournalDepth: 4, RedisUp: true, EtcdError: "etcd did not answer\nwithin 3s",
		Shards: []client.ClusterShard{
			{Shard: 0, Leader: &client.Leader{ID: "event-a", Addr: "10.0.0.5:9091"}, LeaderToken: 7, Pending: 1200, Overdue: 3, OldestOverdueSeconds: 1.54, Firing: 4},
			{Shard: 1, LeaderToken: 6, Pending: 900, Overdue: 900, OldestOverdueSeconds: 95.2, Paused: 12, Dead: 2},
		},
		Processes: []client.Process{
			{ID: "event-a", Kind: "event", Version: "v1.4.0", Addr: "10.0.0.5:9091", Ready: true, StartedAt: now.Add(-90 * time.Minute)},
			{ID: "work-b", Kind: "work", Ready: false, Reason: "kafka: dial tcp 10.0.0.9:9092:\tconnection refused"},
		},
		WorkedTopics: []client.WorkedTopic{
			{Topic: "billing", Group: "billing-workers", Since: time.Date(2029, 12, 1, 8, 30, 0, 123e6, time.UTC), By: "work-b"},
			{Topic: "dq.tasks", Group: "dq-workers\nx"},
		},
	}
	var b strings.Builder
	if err := printCluster(&b, cl, now); err != nil {
		t.Fatal(err)
	}
	want := `namespace prod, 2 shards, redis up, journal 4
etcd: etcd did not answer within 3s
pending 2100, overdue 903 (oldest 1m35s), shards without a leader 1

SHARD  LEADER   ADDR           TOKEN  PENDING  OVERDUE  OLDEST OVERDUE  PAUSED  FIRING  DEAD
0      event-a  10.0.0.5:9091  7      1200     3        1.5s            0       4       0
1      -        -              6      900      900      1m35s           12      0       2

PROCESS  KIND   VERSION  ADDR           READY  UP       REASON
event-a  event  v1.4.0   10.0.0.5:9091  yes    1h30m0s  -
work-b   work   -        -              NO     -        kafka: dial tcp 10.0.0.9:9092: connection refused
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	// with etcd read: the worked topics too
	cl.EtcdError = ""
	b.Reset()
	if err := printCluster(&b, cl, now); err != nil {
		t.Fatal(err)
	}
	want = strings.Replace(want, "etcd: etcd did not answer within 3s\n", "", 1) + `
WORKED TOPIC  GROUP            SINCE
billing       billing-workers  2029-12-01T08:30:00Z
dq.tasks      dq-workers x     -
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := printCluster(&b, &client.Cluster{Namespace: "x", RedisError: "redis is unreachable"}, now); err != nil ||
		!strings.Contains(b.String(), "redis DOWN") || !strings.Contains(b.String(), "redis: redis is unreachable") || !strings.Contains(b.String(), "no processes registered") ||
		!strings.HasSuffix(b.String(), "\nno worked topics: tasks fired to any topic end delivered once Kafka has them\n") {
		t.Errorf("redis down: %q", b.String())
	}
}

// TestOperatorCommandsTrustCA: the new commands, in both outputs, reach
// an https daemon through --ca and are refused without it.
func TestOperatorCommandsTrustCA(t *testing.T) {
	_, pair, files := privateCA(t)
	cert, err := pair.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/tasks":
			io.WriteString(w, `{"tasks":[{"id":"tls-1","type":"t","state":"scheduled","due_at":"2030-01-01T00:00:00.000Z","attempt":1,"max_attempts":10,"shard":3}]}`)
		case "/v1/types":
			io.WriteString(w, `{"types":[{"type":"t","paused":false,"parked":0}]}`)
		case "/v1/types/t/pause":
			io.WriteString(w, `{"type":"t","paused":true,"changed":true}`)
		case "/v1/cluster":
			io.WriteString(w, `{"namespace":"tls","shard_count":0,"shards":[],"processes":[],"worked_topics":[],"journal_depth":0,"redis_up":true}`)
		case "/v1/cluster/worked/dq.tasks":
			io.WriteString(w, `{"topic":"dq.tasks","forgotten":true}`)
		case "/v1/tasks/cancel", "/v1/dead/redrive":
			io.WriteString(w, `{"changed":1,"more":false}`)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	for _, args := range [][]string{
		{"tasks", "list"}, {"tasks", "list", "-o", "json"}, {"tasks", "cancel", "--type", "t"},
		{"types"}, {"types", "-o", "json"}, {"types", "pause", "t"},
		{"cluster"}, {"cluster", "-o", "json"}, {"cluster", "forget-topic", "dq.tasks"},
		{"dead", "redrive", "--type", "t"},
	} {
		out, _, err := runDQ(t, map[string]string{"DQ_ADDR": srv.URL, "DQ_CA": files.CA}, args...)
		if err != nil || out == "" {
			t.Errorf("dq %s with DQ_CA: %q, %v", strings.Join(args, " "), out, err)
		}
		if _, _, err := runDQ(t, map[string]string{"DQ_ADDR": srv.URL}, args...); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("dq %s without --ca: %v, want a certificate error", strings.Join(args, " "), err)
		}
	}
}
