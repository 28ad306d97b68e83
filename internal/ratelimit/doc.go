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
// The pieces and their seams:
//
//   - Rules (etcdrules.go): Put/Delete/Get/List in etcd under
//     /<ns>/limits/<type>, and Run(ctx), a watcher keeping an in-memory
//     snapshot that Rule(type) reads without blocking.
//   - Limiter (limiter.go): Admit(ctx, []Item) decides a fetched batch in
//     one Redis round trip (a type without a rule costs none); deferred
//     items carry NotBefore, the moment they can pass; Refresh renews a
//     slot while its handler runs, Done frees it; Usage/UsageOf read the
//     current consumption. Each atomic check is one Lua script (*.lua,
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
