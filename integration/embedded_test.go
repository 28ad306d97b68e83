package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/embedded"
)

// TestLocalEmbedded: a producer that runs the daemon in its own process
// (package embedded) schedules into the namespace of the real binaries
// (an event process and a work process, no daemon binary): its tasks are
// fired and delivered to the webhook, including one it journaled while
// Redis was down and replayed once Redis was back.
func TestLocalEmbedded(t *testing.T) {
	t.Parallel()
	rec := newRecorder(func(delivery) (int, time.Duration) { return http.StatusOK, 0 })
	c := localProvisioner{}.Start(t, Spec{Daemons: 0, Events: 1, Workers: 1, Webhook: rec}).(*localCluster)
	p, err := embedded.Open(t.Context(), embedded.Options{
		Args: []string{
			"-namespace=" + c.ns,
			fmt.Sprintf("-shards=%d", c.shards),
			"-redis-addrs=" + c.redis.Addr,
			"-etcd-endpoints=" + strings.Join(c.etcd.Endpoints, ","),
			"-journal-dir=" + t.TempDir(),
			"-redis-timeout=500ms",
		},
		Getenv: func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx := t.Context()
	task := func(id string, due time.Time) client.Task {
		return client.Task{ID: id, Type: "it.embedded", Payload: json.RawMessage(`{"n":1}`), DueAt: due, Topic: "dq.tasks"}
	}

	var ids []string
	soon := time.Now().Add(time.Second)
	for i := range 40 {
		id := fmt.Sprintf("emb-%d", i)
		if _, err := p.Schedule(ctx, task(id, soon)); err != nil {
			t.Fatalf("schedule %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	var batch []client.Task
	for i := range 40 {
		batch = append(batch, task(fmt.Sprintf("emb-batch-%d", i), soon))
	}
	out, err := p.ScheduleBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		if r.Err != nil || r.Outcome != "created" {
			t.Fatalf("batch item: %+v", r)
		}
		ids = append(ids, r.ID)
	}

	c.StopRedis(t)
	r, err := p.Schedule(ctx, task("emb-journaled", time.Now().Add(time.Second)))
	if err != nil || !r.Journaled() {
		t.Fatalf("schedule while Redis is down: %+v, %v", r, err)
	}
	ids = append(ids, "emb-journaled")
	c.StartRedis(t)

	rec.waitDone(t, ids, 60*time.Second)
	if p.JournalDepth() != 0 {
		t.Fatalf("journal depth %d after the replay", p.JournalDepth())
	}
	// the handler ran; its outcome is stored by the worker's finisher
	// after the handler returned (a loaded CI machine read "fired" here)
	waitFor(t, 10*time.Second, "the journaled task stored as succeeded", func() (bool, string) {
		info, err := p.Client().Get(ctx, "emb-journaled")
		if err != nil {
			return false, err.Error()
		}
		return info.State == "succeeded", fmt.Sprintf("%+v", info)
	})
}
