package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/worked"
)

// TestWorkedTopics: Cluster lists the worked topics; ForgetWorkedTopic
// removes one (false the second time); a bad name is the daemon's 422, an
// empty one refused before any request; without etcd a forget is 503.
func TestWorkedTopics(t *testing.T) {
	url, _, etcd, ns := startOperatorDaemonEtcd(t, "tok", true)
	ctx := t.Context()
	c := client.New(url, client.WithToken("tok"))
	cl, err := c.Cluster(ctx)
	if err != nil || cl.WorkedTopics == nil || len(cl.WorkedTopics) != 0 {
		t.Fatalf("cluster without worked topics: %+v, %v", cl, err)
	}
	ec := etcd.Client(t)
	before := time.Now().Add(-time.Second)
	for _, topic := range []string{"dq.tasks", "billing"} {
		if _, err := worked.Declare(ctx, ec, ns, topic, "g-"+topic, "work-1"); err != nil {
			t.Fatal(err)
		}
	}
	cl, err = c.Cluster(ctx)
	if err != nil || len(cl.WorkedTopics) != 2 {
		t.Fatalf("cluster: %+v, %v", cl, err)
	}
	b := cl.WorkedTopics[0]
	if b.Topic != "billing" || b.Group != "g-billing" || b.By != "work-1" || b.Since.Before(before) || b.Since.After(time.Now()) || cl.WorkedTopics[1].Topic != "dq.tasks" {
		t.Fatalf("worked topics: %+v", cl.WorkedTopics)
	}

	if forgotten, err := c.ForgetWorkedTopic(ctx, "dq.tasks"); err != nil || !forgotten {
		t.Fatalf("forget: %v, %v", forgotten, err)
	}
	if forgotten, err := c.ForgetWorkedTopic(ctx, "dq.tasks"); err != nil || forgotten {
		t.Fatalf("forget again: %v, %v", forgotten, err)
	}
	if cl, err := c.Cluster(ctx); err != nil || len(cl.WorkedTopics) != 1 || cl.WorkedTopics[0].Topic != "billing" {
		t.Fatalf("cluster after the forget: %+v, %v", cl, err)
	}
	var ae *client.APIError
	for _, bad := range []string{"a b", "..", "a/b"} {
		if _, err := c.ForgetWorkedTopic(ctx, bad); !errors.As(err, &ae) || ae.Status != 422 || ae.Code != "invalid_task" || !strings.HasPrefix(ae.Message, "topic:") {
			t.Errorf("forget %q: %v, want 422 naming topic", bad, err)
		}
	}
	if _, err := c.ForgetWorkedTopic(ctx, ""); err == nil || errors.As(err, &ae) {
		t.Errorf("forget of an empty topic: %v, want an error before any request", err)
	}

	noEtcd, _ := startOperatorDaemon(t, "", false)
	if _, err := client.New(noEtcd).ForgetWorkedTopic(ctx, "billing"); !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "unavailable" {
		t.Errorf("forget without etcd: %v", err)
	}
}
