// Package daemon is delayq's ingress: the HTTP API that schedules,
// reschedules, cancels and reads delayed tasks in the Redis shard store,
// and keeps accepting schedules while Redis is unreachable by writing them
// to a durable local journal that it replays later (compensating writes).
//
// Layout: App (app.go) is wiring. Below it the ingest core (core.go) owns
// the write path and everything it knows of Redis; above it the HTTP
// surface calls the core and nothing else of Redis or the journal.
//
//   - the ingest core (core.go, ingest.go): scheduleOne/scheduleMany
//     (the topic and record-size checks, then Redis or the journal), the
//     store for the operations that cannot be journaled (storeFor,
//     writable, ... answering 503 while Redis is down), Redis' and the
//     shards' health (health.go, shardhealth.go), /readyz; its
//     components, each one Run(ctx), started and stopped by App.Run:
//   - the store keeper (storekeeper.go): opens the Redis store, retrying
//     while Redis is down, then pings it to keep delayq_redis_up honest
//     and, on a Redis Cluster, probes the shards known down;
//   - the compensator (compensator.go): replays the journal into Redis;
//   - the coalescer (coalescer.go): groups concurrent single-task
//     schedules into one store call (group commit, no added wait);
//   - the HTTP surface (api.go: routing, the guard of every /v1 request,
//     metrics, the handler adapter handle): each endpoint is a function
//     from the request to its answer, one file per resource (tasks.go,
//     dead.go, stats.go, operator.go, types.go, cluster.go, shards.go,
//     schedules.go, limits.go); package wire decodes the bodies and
//     encodes the answers, with the one error vocabulary of the API
//     (wire/error.go); package api declares the answers the Go client
//     reads;
//   - an embedded producer (package embedded) enters at App.ScheduleFields
//     and App.ScheduleFieldsBatch: the core's schedule path without JSON.
//
// # API
//
//	POST   /v1/tasks               201 created | 200 unchanged/updated | 202 journaled | 409 | 4xx
//	POST   /v1/tasks/batch         200 {"results":[…]} one per task, in order | 413 batch_too_large | 4xx
//	GET    /v1/tasks/{id}          200 task (state "journaled" while only in the journal) | 404
//	PATCH  /v1/tasks/{id}          200 {"id","due_at"} | 404 | 409 | 503 while Redis is down
//	DELETE /v1/tasks/{id}          200 {"id","state":"cancelled"} | 404 | 409 | 503 while Redis is down
//	GET    /v1/stats               200 totals, per shard, journal_depth, redis_up, shards_down (also while Redis is down)
//	GET    /v1/dead?limit=N        200 {"dead":[task + "died_at"]} (N 1..1000, default 100)
//	POST   /v1/dead/{id}/redrive   200 {"id","state":"scheduled","due_at"} | 404 | 409
//	DELETE /v1/dead/{id}           200 {"id","deleted":true} | 404 | 409
//	GET    /v1/tasks?state&type&…  200 {"tasks":[…],"next_cursor"} list/search across shards (operator.go)
//	POST   /v1/tasks/cancel        200 {"changed","more"} bulk by ids or filter
//	POST   /v1/dead/redrive        200 {"changed","more"} bulk by ids or filter
//	DELETE /v1/dead                200 {"changed","more"} bulk by ids or filter (or ?type= without a body)
//	GET    /v1/types               200 {"types":[…]} paused, parked, limit (types.go)
//	POST   /v1/types/{type}/pause  200 | 503 without etcd; …/resume unparks at once
//	GET    /v1/cluster             200 leaders, shard figures, processes (cluster.go)
//	GET    /v1/shards, PUT /v1/shards, /v1/limits…, GET /v1/openapi.yaml
//	GET    /ui/                    the operator console (package console; no token for the assets)
//
// api/openapi.yaml describes every endpoint; openapi_test.go checks it
// against this router.
//
// A schedule answer is {"id","state","outcome","due_at","shard"}; outcome
// is created (201), unchanged (200, identical re-submit), updated (200,
// upsert of a waiting task) or journaled (202). Errors are
// {"error":{"code","message"}} with the codes in wire/error.go; bad input is
// a 4xx and never changes state. The request decoding rules are at the top
// of wire/decode.go. With DQ_API_TOKEN set, /v1/* needs "Authorization: Bearer
// <token>"; /healthz, /readyz and /metrics stay open.
//
// # Compensation
//
// When a schedule meets an unavailable Redis (redisstore.IsUnavailable:
// refused, reset, timed out after DQ_REDIS_TIMEOUT, refusing writes), the
// normalised task is appended to the journal (fsync'd) and answered 202.
// Its due time is then absolute: a "delay" is resolved with the daemon's
// clock at acceptance, because Redis' clock is not available.
//
// Order is kept per task id, not globally: a schedule is journaled
// without trying Redis when an earlier submission of its id may still be
// in the journal (a count of entries per lane, a hash of the id:
// lanes.go), when its shard is known down (a Redis Cluster master that
// failed: shardhealth.go), or when Redis does not answer at all (a single
// server down, every master of a cluster). Everything else goes to Redis,
// so one master's outage does not delay the shards of the others.
//
// The compensator replays entries oldest first, per shard: the entries of
// a shard that is down stay in place and the pass goes on past them; a
// restarted daemon replays what is left. Reads, PATCH and DELETE cannot be
// journaled and answer 503 while their Redis is down (and PATCH/DELETE of
// an id that is still in the journal answer 503 until it is replayed).
//
// /readyz means "can accept schedules": the journal is open. Redis'
// state is in /v1/stats (redis_up, shards_down) and the delayq_redis_up
// and delayq_redis_shards_down gauges.
package daemon
