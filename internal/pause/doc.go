// Package pause provides the pause state of task types: which types an
// operator paused, stored in etcd, and a Watcher that keeps every work
// process's view of it current.
//
// A paused type has the key /<ns>/paused/<type> with the JSON value
// {"paused_at":"<RFC 3339>"}; no key means the type runs. Pause and Resume
// are idempotent (a transaction, resp. one delete, reports whether the
// state changed); List reads the state once (the daemon's /v1/types).
//
// A worker that claims a task of a paused type parks it in Redis
// (redisstore.ParkMany: no attempt used, the due time kept) instead of
// running it; resuming the type unparks its tasks (redisstore.Unpark), and
// every work process reconciles parked types against the Watcher's view
// (see package worker), which repairs a park that landed after a resume.
package pause
