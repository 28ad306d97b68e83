// Package api is the daemon's HTTP API as a contract: the machine-readable
// description (OpenAPI is api/openapi.yaml, OpenAPI 3.1, compiled in) and
// the wire types that cross the API in both directions, declared once for
// the daemon that writes them and the Go client that reads them (limits.go:
// the rate-limit rule and its usage; shards.go: the shard map view;
// cluster.go: the cluster view). The daemon serves the document at GET
// /v1/openapi.yaml; its tests check it against the real router (every
// route documented, every documented route and status code real) and
// decode its answers strictly into these types, so they cannot drift.
//
// The package imports nothing of delayq: the public client imports it.
package api

import _ "embed" // for OpenAPI

// OpenAPI is the OpenAPI 3.1 document of the daemon's API (YAML).
//
//go:embed openapi.yaml
var OpenAPI []byte
