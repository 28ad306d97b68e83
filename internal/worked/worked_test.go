package worked

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// sinceRE is RFC 3339 with milliseconds, in UTC.
var sinceRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// stored reads the raw value of topic's key (fails when there is none).
func stored(t *testing.T, cli *clientv3.Client, ns, topic string) (map[string]string, int64) {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/"+ns+"/worked/"+topic)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("key of %s: %v %v", topic, resp, err)
	}
	if resp.Kvs[0].Lease != 0 {
		t.Fatalf("key of %s has lease %x: a worked topic must outlive its process", topic, resp.Kvs[0].Lease)
	}
	var v map[string]string
	if err := json.Unmarshal(resp.Kvs[0].Value, &v); err != nil {
		t.Fatalf("value %q: %v", resp.Kvs[0].Value, err)
	}
	return v, resp.Kvs[0].ModRevision
}

func TestDeclareListForget(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)

	before := time.Now().Add(-time.Second)
	created, err := Declare(ctx, cli, ns, "dq.tasks", "dq-workers", "work-1")
	if err != nil || !created {
		t.Fatalf("first Declare: %v %v", created, err)
	}
	v, modRev := stored(t, cli, ns, "dq.tasks")
	if len(v) != 4 || v["topic"] != "dq.tasks" || v["group"] != "dq-workers" || v["by"] != "work-1" || !sinceRE.MatchString(v["since"]) {
		t.Fatalf("stored value %v: want topic, group, by and since (RFC 3339 ms, UTC)", v)
	}
	since, _ := time.Parse(time.RFC3339Nano, v["since"])
	if since.Before(before) || since.After(time.Now().Add(time.Second)) {
		t.Fatalf("since %v", since)
	}

	// again, and by another group: nothing changes, the first declaration stays
	for _, g := range []string{"dq-workers", "other-group"} {
		if created, err := Declare(ctx, cli, ns, "dq.tasks", g, "work-2"); err != nil || created {
			t.Fatalf("Declare again by %s: %v %v", g, created, err)
		}
	}
	if v2, rev := stored(t, cli, ns, "dq.tasks"); rev != modRev || v2["since"] != v["since"] || v2["group"] != "dq-workers" {
		t.Fatalf("a later Declare rewrote the key: %v at %d, was %v at %d", v2, rev, v, modRev)
	}

	if _, err := Declare(ctx, cli, ns, "billing_v2", "billing", "work-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := Declare(ctx, cli, ns, "a-first", "billing", "work-3"); err != nil {
		t.Fatal(err)
	}
	got, err := List(ctx, cli, ns)
	if err != nil || len(got) != 3 {
		t.Fatalf("List: %+v %v", got, err)
	}
	if names := []string{got[0].Topic, got[1].Topic, got[2].Topic}; !slices.Equal(names, []string{"a-first", "billing_v2", "dq.tasks"}) {
		t.Fatalf("List not sorted by topic: %v", names)
	}
	if d := got[2]; d.Group != "dq-workers" || d.By != "work-1" || !d.Since.Equal(since) || d.Since.Location() != time.UTC {
		t.Fatalf("listed %+v, want the first declaration (since %v)", d, since)
	}
	// another namespace is separate
	if other, err := List(ctx, cli, ns+"x"); err != nil || len(other) != 0 {
		t.Fatalf("List of another namespace: %v %v", other, err)
	}

	if existed, err := Forget(ctx, cli, ns, "dq.tasks"); err != nil || !existed {
		t.Fatalf("Forget: %v %v", existed, err)
	}
	if existed, err := Forget(ctx, cli, ns, "dq.tasks"); err != nil || existed {
		t.Fatalf("second Forget: %v %v", existed, err)
	}
	if got, err := List(ctx, cli, ns); err != nil || len(got) != 2 {
		t.Fatalf("List after Forget: %v %v", got, err)
	}
	// declared again after a Forget: a new declaration
	if created, err := Declare(ctx, cli, ns, "dq.tasks", "new-group", "work-4"); err != nil || !created {
		t.Fatalf("Declare after Forget: %v %v", created, err)
	}
	if v, _ := stored(t, cli, ns, "dq.tasks"); v["group"] != "new-group" {
		t.Fatalf("after Forget and Declare: %v", v)
	}
}

// Bad topic names are refused with ErrInvalidTopic (naming topic) and
// write nothing; a bad namespace is an error, but not bad input.
func TestRejectsBadTopics(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	for name, topic := range map[string]string{
		"empty":    "",
		"slash":    "a/b",
		"dot":      ".",
		"dotdot":   "..",
		"space":    "a b",
		"newline":  "a\nb",
		"unicode":  "é",
		"colon":    "a:b",
		"too long": strings.Repeat("x", task.MaxTopicLen+1),
	} {
		err := ValidateTopic(topic)
		if !errors.Is(err, ErrInvalidTopic) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), ErrInvalidTopic.Error()+": "), "topic: ") {
			t.Errorf("ValidateTopic(%s): %v, want ErrInvalidTopic naming topic", name, err)
		}
		if _, err := Declare(ctx, cli, ns, topic, "g", "p"); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("Declare(%s): %v, want ErrInvalidTopic", name, err)
		}
		if _, err := Forget(ctx, cli, ns, topic); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("Forget(%s): %v, want ErrInvalidTopic", name, err)
		}
	}
	for _, ok := range []string{strings.Repeat("x", task.MaxTopicLen), "dq.tasks", "A-z_0.9", "..."} {
		if err := ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%.20q): %v", ok, err)
		}
	}
	resp, err := cli.Get(ctx, "/"+ns+"/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("refused calls wrote %v (%v)", resp.Kvs, err)
	}
	for _, bad := range []string{"", "a/b"} {
		if _, err := Declare(ctx, cli, bad, "dq.tasks", "g", "p"); err == nil || errors.Is(err, ErrInvalidTopic) {
			t.Errorf("Declare in namespace %q: %v", bad, err)
		}
		if _, err := List(ctx, cli, bad); err == nil {
			t.Errorf("List of namespace %q succeeded", bad)
		}
		if err := NewView(cli, bad, nil).Run(ctx); err == nil {
			t.Errorf("View of namespace %q ran", bad)
		}
	}
	if err := NewView(nil, ns, nil).Run(ctx); err == nil {
		t.Error("View without a client ran")
	}
}

// Keys not written by Declare: a value that does not decode still
// declares its topic; a key naming no valid topic is left out.
func TestListForeignKeys(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	for k, v := range map[string]string{
		"junk":   "not json",
		"a/b":    `{}`,
		"a b":    `{}`,
		"named":  `{"topic":"other","group":"g","since":"2026-11-29T01:02:03.456Z","by":"p"}`,
		"badday": `{"topic":"badday","since":"yesterday"}`,
	} {
		if _, err := cli.Put(ctx, Key(ns, k), v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := List(ctx, cli, ns)
	want := []Topic{
		{Topic: "badday"},
		{Topic: "junk"},
		{Topic: "named", Group: "g", By: "p", Since: time.Date(2026, 11, 29, 1, 2, 3, 456e6, time.UTC)},
	}
	if err != nil || len(got) != len(want) {
		t.Fatalf("List: %+v %v", got, err)
	}
	for i := range want {
		if got[i].Topic != want[i].Topic || got[i].Group != want[i].Group || got[i].By != want[i].By || !got[i].Since.Equal(want[i].Since) {
			t.Errorf("List[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The JSON form: since in RFC 3339 with milliseconds, UTC; omitted
// fields read as empty.
func TestTopicJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 2, 2, 3, 456789000, time.FixedZone("CET", 3600))
	b, err := json.Marshal(Topic{Topic: "dq.tasks", Group: "dq-workers", By: "w1", Since: at})
	if want := `{"topic":"dq.tasks","group":"dq-workers","since":"2026-11-29T01:02:03.456Z","by":"w1"}`; err != nil || string(b) != want {
		t.Fatalf("Marshal: %s %v, want %s", b, err, want)
	}
	var back Topic
	if err := json.Unmarshal(b, &back); err != nil || back.Since != time.Date(2026, 11, 29, 1, 2, 3, 456e6, time.UTC) || back.Topic != "dq.tasks" || back.By != "w1" {
		t.Fatalf("Unmarshal: %+v %v", back, err)
	}
	if b, err := json.Marshal(Topic{Topic: "x"}); err != nil || string(b) != `{"topic":"x","group":"","since":"","by":""}` {
		t.Fatalf("Marshal with a zero since: %s %v", b, err)
	}
	var z Topic
	if err := json.Unmarshal([]byte(`{"topic":"x"}`), &z); err != nil || !z.Since.IsZero() {
		t.Fatalf("Unmarshal without since: %+v %v", z, err)
	}
}

// The view: nothing is worked before its first list; then it follows
// declarations and forgets.
func TestViewFollows(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	if _, err := Declare(ctx, cli, ns, "dq.tasks", "g", "p"); err != nil {
		t.Fatal(err)
	}
	v := NewView(cli, ns, nil)
	if v.Worked("dq.tasks") || len(v.Topics()) != 0 || v.Topics() == nil || v.Synced() {
		t.Fatal("a view worked a topic before Run")
	}
	select {
	case <-v.Ready():
		t.Fatal("ready before Run")
	default:
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- v.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-v.Ready()
	if !v.Worked("dq.tasks") || v.Worked("billing") || v.Worked("") || !slices.Equal(v.Topics(), []string{"dq.tasks"}) {
		t.Fatalf("after the first list: %v", v.Topics())
	}
	if _, err := Declare(ctx, cli, ns, "billing", "g2", "p2"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "declared topic seen", func() bool { return v.Worked("billing") })
	if _, err := Forget(ctx, cli, ns, "dq.tasks"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "forgotten topic gone", func() bool { return !v.Worked("dq.tasks") })
	if !slices.Equal(v.Topics(), []string{"billing"}) {
		t.Fatalf("Topics: %v", v.Topics())
	}
	// a key that names no valid topic is none
	if _, err := cli.Put(ctx, Key(ns, "a b"), "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := Declare(ctx, cli, ns, "last", "g", "p"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "last declaration seen", func() bool { return v.Worked("last") })
	if v.Worked("a b") || !slices.Equal(v.Topics(), []string{"billing", "last"}) {
		t.Fatalf("Topics with a foreign key: %v", v.Topics())
	}
}

// An etcd that is down is an error (never ErrInvalidTopic).
func TestDeclareEtcdDown(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	e.Stop(t)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	ns := testNS(t)
	if _, err := Declare(ctx, cli, ns, "dq.tasks", "g", "p"); err == nil || errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("Declare with etcd down: %v", err)
	}
	if _, err := Forget(ctx, cli, ns, "dq.tasks"); err == nil || errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("Forget with etcd down: %v", err)
	}
	if _, err := List(ctx, cli, ns); err == nil {
		t.Fatal("List with etcd down succeeded")
	}
}
