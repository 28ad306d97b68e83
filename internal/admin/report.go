package admin

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is the state of one dependency in a readiness report: one line
// for operators.
type Check struct {
	Name   string // "redis", "journal", "kafka topic dq.tasks"
	OK     bool   // the dependency serves (a degraded one that the process works around may say OK=false and still be ready)
	Detail string // "ok", or what is wrong, on one line
}

// Line is the check as /readyz writes it: "<name>: <detail>".
func (c Check) Line() string {
	return c.Name + ": " + strings.ReplaceAll(c.Detail, "\n", " ")
}

// ReportFunc says whether the process can do its job and how each of its
// dependencies is.
type ReportFunc func(ctx context.Context) (ready bool, checks []Check)

// ReadyBody is the JSON body of /readyz as MountReport writes it; Status
// and Reason are what Mount writes, Checks has one line per dependency.
type ReadyBody struct {
	Status string   `json:"status"`           // "ready" or "not ready"
	Reason string   `json:"reason,omitempty"` // the lines of the failing checks, joined by "\n"
	Checks []string `json:"checks"`           // every check, "<name>: <detail>"
}

// MountReport is Mount with a readiness report: /readyz answers 200 when
// report says ready and 503 otherwise, and its body names every
// dependency on a line of its own (ready or not), so that an operator
// sees what is degraded before it becomes an outage.
func MountReport(mux *http.ServeMux, reg *prometheus.Registry, report ReportFunc) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		ready, checks := report(ctx)
		body := ReadyBody{Status: "ready", Checks: make([]string, 0, len(checks))}
		var failing []string
		for _, c := range checks {
			body.Checks = append(body.Checks, c.Line())
			if !c.OK {
				failing = append(failing, c.Line())
			}
		}
		body.Reason = strings.Join(failing, "\n")
		code := http.StatusOK
		if !ready {
			body.Status, code = "not ready", http.StatusServiceUnavailable
		}
		writeJSON(w, code, body)
	})
	// OpenMetrics when the scraper asks for it (Prometheus does): the
	// worker's lag and duration histograms carry exemplars naming the
	// trace of a sampled attempt (docs/tracing.md), which only that
	// format shows; plain text otherwise
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
}
