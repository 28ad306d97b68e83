// Package ratelimit provides delayq's per-task-type rate limits: rules
// stored in etcd and watched live by every worker, enforced atomically in
// Redis so that all work processes share them, and an HTTP API to manage
// them.
//
// Three kinds of limit, any subset per type (Rule):
//
//   - window quota: at most Limit tasks per fixed window, windows aligned on
//     Redis' clock; a batch straddling the quota is partly admitted;
//   - token bucket: Rate per second refilled continuously at millisecond
//     granularity, up to Burst; below Reserve tokens only tasks with
//     priority >= MinPriority may take one;
//   - concurrency: at most Limit tasks running at once; a slot expires after
//     SlotTTL, so a crashed worker's slots come back.
//
// Scope (Rule.Scope): "" or "type" limits the whole type; "key" each task
// key (its id when it has none); "header:<name>" each value of that task
// header (tasks without it share the empty value). With a key or header
// scope every kind above applies to each value apart (admitkeyed.lua; the
// state of all values lives in a few keys of the type, one field per
// value: keys.go), and, unless Unordered, a value's tasks start in due
// order:
//
//   - a deferred task of a value joins the value's queue (its place: the
//     due it had when first deferred) and the value's other tasks wait
//     behind it, deferred with ReasonOrder until just after its expected
//     return (its NotBefore; when it is late, as long as it is overdue, at
//     least ConcurrencyRetry); it leaves the queue when admitted;
//   - a task that fails and goes to retry keeps its place through
//     Limiter.Hold (the worker calls it; a no-op without an ordered keyed
//     rule);
//   - a head that is not back OrderGrace (default 30s) after its expected
//     return is dropped — it was cancelled or ended elsewhere, or its
//     deferral was lost — so a value never blocks forever; a task that
//     comes back later than that joins the queue again at its current due;
//   - the tasks of a value in one batch are decided in due order, those
//     in its queue by their place; priority only decides which side of the
//     bucket's reserve a task is on. Unordered rules decide each value's
//     tasks highest priority first, each on its own.
//
// A keyed value's state goes when it is idle: its fields leave the type's
// hashes a horizon (the longest of window, slot TTL, bucket refill and a
// minute, plus a quarter) after its last activity, each key expires a
// horizon after its last write, a queue grace after its latest expected
// return. Metrics stay per type (no label per value): the deferred counter
// gains the "order" reason; a keyed rule exports no gauges.
//
// The pieces and their seams:
//
//   - Rules (etcdrules.go): Put/Delete/Get/List in etcd under
//     /<ns>/limits/<type>, and Run(ctx), a watcher keeping an in-memory
//     snapshot that Rule(type) reads without blocking.
//   - Limiter (limiter.go): Admit(ctx, []Item) decides a fetched batch in
//     one Redis round trip (a type without a rule costs none); deferred
//     items carry NotBefore, the moment they can pass; Refresh renews a
//     slot while its handler runs, Done frees it; Usage/UsageOf read the
//     current consumption (the busiest values of a keyed rule); Hold keeps
//     a retried task's place in order. Each atomic check is one Lua script (*.lua,
//     next to its caller); "now" is Redis TIME inside the script.
//   - NewAPI (api.go): GET /v1/limits, GET/PUT/DELETE /v1/limits/{type}.
//
// Bounds: a rule's values are checked at Put (rates from MinRate, one
// token a day, to MaxRate; windows and slot TTLs up to a day; counts up
// to MaxLimit), so that no arithmetic overflows in Go or in Lua's
// doubles. A rule stored before a bound existed still applies: the
// Limiter computes waits in float64 and cuts them to MaxDeferral before
// converting them, never defers a task past task.MaxDueMillis, and caps
// a bucket key's TTL in Lua.
package ratelimit
