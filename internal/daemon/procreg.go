package daemon

import (
	"context"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/registry"
)

// newRegistrar registers this daemon in the namespace's process registry
// (GET /v1/cluster lists it), with /readyz's verdict as its readiness.
// Without etcd (DQ_ETCD_ENDPOINTS) it registers nothing and returns nil.
func (a *App) newRegistrar() (*registry.Registrar, error) {
	if a.etcd == nil || a.srv == nil { // an embedded daemon has no address to list
		return nil, nil
	}
	return registry.New(registry.Config{
		Client:    a.etcd,
		Namespace: a.cfg.Namespace,
		Proc: registry.Proc{ID: registry.DefaultID(), Kind: registry.KindDaemon,
			Addr: registry.AdvertiseAddr(a.cfg.HTTPAddr, a.srv.Addr())},
		Ready: func(ctx context.Context) (bool, string) {
			ready, checks := a.core.report(ctx)
			var failing []string
			for _, c := range checks {
				if !c.OK {
					failing = append(failing, c.Line())
				}
			}
			return ready, strings.Join(failing, "; ")
		},
		// the daemon's readiness writes a journal probe: ask every 2 s,
		// not every 500 ms
		Poll:     2 * time.Second,
		Counters: registry.Sum(a.reg, map[string]string{"delayq_tasks_scheduled_total/outcome=created": "scheduled"}),
		Log:      a.log,
	})
}

// runRegistrar keeps the registration until ctx ends, then deletes it.
func (a *App) runRegistrar(ctx context.Context) error {
	if a.procs == nil {
		return nil
	}
	return a.procs.Run(ctx)
}
