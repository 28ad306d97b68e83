// Package etcdwatch keeps an in-memory view of the keys under an etcd
// prefix current through a watch.
//
// A [Map] lists the prefix, publishes the result as an immutable snapshot,
// then watches from the next revision and applies each PUT and DELETE onto
// a copy of the snapshot. When the watch fails (etcd unreachable, a
// compacted revision, no leader, the watch channel closed) it lists again
// after a backoff (100 ms doubling up to 2 s); readers keep the last
// snapshot meanwhile. Readers never block: Snapshot, Revision, Synced and
// Ready are safe for concurrent use.
//
// Each key is reduced to its name (the key with the prefix trimmed) and its
// value is decoded by a function the caller gives: a name whose value does
// not decode (decode reports false) is left out of the view, and a PUT of
// such a value removes the name. Package pause (paused task types) and
// package ratelimit (rate-limit rules) build on it.
package etcdwatch
