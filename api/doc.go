// Package api holds the machine-readable description of the daemon's HTTP
// API: OpenAPI is api/openapi.yaml (OpenAPI 3.1), compiled in. The daemon
// serves it at GET /v1/openapi.yaml; its tests check it against the real
// router (every route documented, every documented route and status code
// real).
package api

import _ "embed" // for OpenAPI

// OpenAPI is the OpenAPI 3.1 document of the daemon's API (YAML).
//
//go:embed openapi.yaml
var OpenAPI []byte
