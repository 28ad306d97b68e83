package event

import (
	"context"
	"net/http"
	"strings"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/registry"
)

// newRegistrar registers this process in the namespace's process registry
// under its process id (the one its shard elections carry, so that the
// cluster view joins shard leaders to admin addresses), with /readyz's
// verdict as its readiness.
func (a *App) newRegistrar() (*registry.Registrar, error) {
	return registry.New(registry.Config{
		Client:    a.etcd,
		Namespace: a.cfg.Namespace,
		Proc: registry.Proc{ID: a.cfg.ProcessID, Kind: registry.KindEvent,
			Addr: registry.AdvertiseAddr(a.cfg.HTTPAddr, a.srv.Addr())},
		Ready:    a.registryReadiness,
		Counters: registry.Sum(a.reg, map[string]string{admin.Namespace + "_fired_total": "fired"}),
		Log:      a.log,
	})
}

// registryReadiness is /readyz's verdict on one line: ready, and what is
// wrong or degraded (the failing reason, etcd's and Kafka's detail).
func (a *App) registryReadiness(ctx context.Context) (bool, string) {
	code, body := a.readiness(ctx)
	var why []string
	for _, k := range []string{"reason", "etcd", "kafka"} {
		if s, ok := body[k].(string); ok && s != "" && s != "ok" {
			why = append(why, k+": "+s)
		}
	}
	return code == http.StatusOK, strings.Join(why, "; ")
}
