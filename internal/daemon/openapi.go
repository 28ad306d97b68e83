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
