package daemon

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/testenv"
)

// With etcd the daemon is in the process registry, ready (its /readyz
// verdict), at its admin address, until it stops.
func TestRegistryListsDaemon(t *testing.T) {
	_, e, cfg := startRedisEtcd(t)
	cli := e.Client(t)
	a := startApp(t, cfg)

	var me registry.Proc
	testenv.WaitFor(t, 10*time.Second, "daemon registered ready", func() bool {
		ps, err := registry.List(t.Context(), cli, cfg.Namespace)
		if err != nil || len(ps) != 1 {
			return false
		}
		me = ps[0]
		return me.Ready
	})
	if me.Kind != registry.KindDaemon || me.Addr != a.Addr() || me.ID == "" || me.Version == "" {
		t.Fatalf("registered as %+v (admin at %s)", me, a.Addr())
	}
	a.stop()
	if ps, err := registry.List(t.Context(), cli, cfg.Namespace); err != nil || len(ps) != 0 {
		t.Fatalf("registry after stop: %+v %v", ps, err)
	}
}

// Without etcd the daemon registers nothing (and needs nothing).
func TestRegistryWithoutEtcd(t *testing.T) {
	r := startRedis(t)
	a := startApp(t, testConfig(t, r.Addr))
	if a.procs != nil {
		t.Fatal("a registrar without etcd endpoints")
	}
}
