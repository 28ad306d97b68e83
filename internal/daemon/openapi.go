package daemon

import (
	"net/http"
	"strconv"

	"github.com/delayq/delayq/api"
)

// serveOpenAPI answers GET /v1/openapi.yaml: the API's OpenAPI 3.1
// description (package api), behind the same bearer token as /v1.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("Content-Length", strconv.Itoa(len(api.OpenAPI)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(api.OpenAPI)
}

// observe, when set (by the package's tests only), is told the method,
// path and status of every answer the daemon's handler writes.
var observe func(method, path string, status int)

// observed wraps h with observe (h itself when observe is nil).
func observed(h http.Handler) http.Handler {
	if observe == nil {
		return h
	}
	return &observer{next: h}
}

type observer struct{ next http.Handler }

func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	o.next.ServeHTTP(sw, r)
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	observe(r.Method, r.URL.Path, sw.code)
}
