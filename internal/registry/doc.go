// Package registry provides the process registry of a namespace: every
// daemon, event and work process keeps a key /<ns>/procs/<kind>/<id> in
// etcd under a lease of its own (TTL 10s) whose JSON value says what it is
// (id, kind, version, admin address, start time) and whether it is ready
// and why not. A Registrar keeps the key (refreshed every 5s and as soon
// as readiness changes; granted again after the lease was lost) and
// deletes it at shutdown; a process that dies disappears when its lease
// expires. List reads every registered process (the daemon's /v1/cluster).
package registry
