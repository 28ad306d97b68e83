package event

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/worked"
)

// The event process follows the worked topics (declared before it
// started, and after), and is ready once it listed them.
func TestEventFollowsWorkedTopics(t *testing.T) {
	w := newWorld(t, 2)
	ctx := t.Context()
	if _, err := worked.Declare(ctx, w.ec, w.ns, "dq.tasks", "dq-workers", "work-1"); err != nil {
		t.Fatal(err)
	}
	a := w.startApp("ev-worked")
	testenv.WaitFor(t, 20*time.Second, "ready", func() bool {
		code, _ := readyz(t, a.Addr())
		return code == http.StatusOK
	})
	if !a.worked.Worked("dq.tasks") || a.worked.Worked("billing") {
		t.Fatalf("worked topics once ready: %v", a.worked.Topics())
	}
	if _, err := worked.Declare(ctx, w.ec, w.ns, "billing", "billing-workers", "work-2"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a later declaration seen", func() bool { return a.worked.Worked("billing") })
	if _, err := worked.Forget(ctx, w.ec, w.ns, "dq.tasks"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a forgotten topic gone", func() bool { return !a.worked.Worked("dq.tasks") })
	if got := a.worked.Topics(); !slices.Equal(got, []string{"billing"}) {
		t.Fatalf("Topics: %v", got)
	}
}

// Until the worked topics were listed, /readyz is not ready (reason
// "worked topics not loaded"), also when the process leads its shards,
// and the registry says so.
func TestReadyzWaitsForWorkedTopics(t *testing.T) {
	w := newWorld(t, 2)
	ctx := t.Context()
	a, err := New(ctx, w.config("ev-unloaded"), testLogger("ev-unloaded"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := a.readiness(ctx); code != http.StatusServiceUnavailable || !strings.Contains(fmtReason(body), "worked topics not loaded") {
		t.Fatalf("readiness before Run: %d %v", code, body)
	}
	// its view reads an etcd that never answers: it never lists
	down := testenv.StartEtcd(t)
	dcli := down.Client(t)
	down.Stop(t)
	a.worked = worked.NewView(dcli, w.ns, nil)

	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testenv.WaitFor(t, 20*time.Second, "both shards led", func() bool { return len(a.Leading()) == 2 })
	var body map[string]any
	testenv.WaitFor(t, 10*time.Second, "/readyz naming the worked topics alone", func() bool {
		var code int
		code, body = readyz(t, a.Addr())
		return code == http.StatusServiceUnavailable && body["reason"] == "worked topics not loaded"
	})
	if body["status"] != "not ready" {
		t.Fatalf("/readyz: %v", body)
	}
	if ready, why := a.registryReadiness(ctx); ready || !strings.Contains(why, "reason: worked topics not loaded") {
		t.Fatalf("registry readiness: %v %q", ready, why)
	}
}

func fmtReason(body map[string]any) string {
	r, _ := body["reason"].(string)
	return r
}
