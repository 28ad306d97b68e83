package work

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/registry"
)

// With etcd (DQ_ETCD_ENDPOINTS), a work process keeps two more things
// there besides the rate limits, on the limits' etcd client: the pause
// state of task types, watched live (the worker parks the tasks of paused
// types, see worker.PauseView), and its registration in the process
// registry (GET /v1/cluster lists it).
//
// Like the rules, the pause state is not waited for: until the watcher
// listed it once (etcd unreachable at start), no type is paused; while
// etcd is unreachable later, the last state stays in force.

// newPause is the pause-state watcher on the limits' etcd client.
func newPause(l *limits, ns string, log *slog.Logger) (*pause.Watcher, error) {
	return pause.NewWatcher(l.etcd, ns, log.With("component", "pause"))
}

// newRegistrar registers process id, reachable at addr, with /readyz's
// check as its readiness.
func newRegistrar(l *limits, ns, id, addr string, ready admin.ReadyFunc, g prometheus.Gatherer, log *slog.Logger) (*registry.Registrar, error) {
	r, err := registry.New(registry.Config{
		Client:    l.etcd,
		Namespace: ns,
		Proc:      registry.Proc{ID: id, Kind: registry.KindWork, Addr: addr},
		Ready: func(ctx context.Context) (bool, string) {
			if err := ready(ctx); err != nil {
				return false, err.Error()
			}
			return true, ""
		},
		Counters: registry.Sum(g, map[string]string{
			admin.Namespace + "_work_handled_total/outcome=succeeded": "succeeded",
			admin.Namespace + "_work_handled_total/outcome=retry":     "retried",
			admin.Namespace + "_work_handled_total/outcome=dead":      "dead",
			admin.Namespace + "_work_consumer_lag":                    "consumer_lag",
		}),
		Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("process registry: %w", err)
	}
	return r, nil
}

// registerPausedTypes registers delayq_paused_types: the number of task
// types paused in this process's view (0 without etcd).
func registerPausedTypes(reg prometheus.Registerer, pw *pause.Watcher) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: admin.Namespace, Name: "paused_types",
		Help: "Task types paused in this work process's view of etcd: their tasks are parked, not run.",
	}, func() float64 {
		if pw == nil {
			return 0
		}
		return float64(len(pw.Types()))
	}))
}
