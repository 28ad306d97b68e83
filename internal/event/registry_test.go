package event

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/registry"
)

// Every event process is in the registry under the process id its shard
// elections carry, ready, at its admin address; a stopped one is gone at
// once.
func TestRegistryListsEventProcesses(t *testing.T) {
	w := newWorld(t, 4)
	a := w.startApp("ev-a")
	b := w.startApp("ev-b")
	w.waitBalanced(20*time.Second, a, b)

	var procs []registry.Proc
	if !poll(10*time.Second, func() bool {
		var err error
		procs, err = registry.List(t.Context(), w.ec, w.ns)
		return err == nil && len(procs) == 2 && procs[0].Ready && procs[1].Ready
	}) {
		t.Fatalf("registry: %+v", procs)
	}
	addrs := map[string]string{"ev-a": a.Addr(), "ev-b": b.Addr()}
	for _, p := range procs {
		if p.Kind != registry.KindEvent || p.Addr != addrs[p.ID] || p.Version == "" || p.Reason != "" {
			t.Errorf("registered %+v, want kind event at %s", p, addrs[p.ID])
		}
	}
	for shard, id := range w.leaders() {
		if _, ok := addrs[id]; !ok {
			t.Errorf("shard %d led by %q, which is not registered", shard, id)
		}
	}

	a.stop(t)
	procs, err := registry.List(t.Context(), w.ec, w.ns)
	if err != nil || len(procs) != 1 || procs[0].ID != "ev-b" {
		t.Fatalf("registry after ev-a stopped: %+v %v", procs, err)
	}
}
