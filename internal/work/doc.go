// Package work is the work binary: delayq's worker runtime
// (github.com/delayq/delayq/worker) with built-in webhook handlers, an
// admin HTTP server (/healthz, /readyz, /metrics) and its configuration.
//
// # Webhooks
//
// DQ_WEBHOOK_URL receives every task type; DQ_WORK_CONFIG names a JSON file
// with per-type webhooks that take precedence:
//
//	{"webhooks": {"order.cancel": {"url": "https://orders.internal/cancel", "timeout": "5s"}}}
//
// Each task is one POST with the payload as the body and these headers:
//
//	Content-Type   the task's content type (application/json or application/octet-stream)
//	Dq-Id          task id
//	Dq-Type        task type
//	Dq-Attempt     1-based attempt number
//	Dq-Max-Attempts
//	Dq-Gen         fire generation; (Dq-Id, Dq-Gen) names one execution
//	Dq-Due-At      due time, unix milliseconds
//
// With DQ_WEBHOOK_SECRET set (raw, or whsec_<base64> as Standard Webhooks
// writes it), requests are signed per https://www.standardwebhooks.com:
//
//	webhook-id         <Dq-Id with '%' and '.' percent-escaped>:<Dq-Attempt>
//	webhook-timestamp  unix seconds when sent
//	webhook-signature  v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">
//	Dq-Signature       deprecated: sha256=<hex HMAC-SHA256 of "<Dq-Id>.<Dq-Attempt>.<body>">,
//	                   replayable and ambiguous; sent for one more release
//
// A receiver verifies with worker.VerifyWebhook (or any Standard Webhooks
// library) over the raw body, within a tolerance of a few minutes.
//
// Responses: 2xx is done. 408, 429 and 5xx are retried, after the
// Retry-After header's delay when it is given (seconds or an HTTP date),
// otherwise with the worker's backoff; so are timeouts and connection
// errors. Every other status (3xx — redirects are not followed — and the
// other 4xx) is a permanent failure: the task goes to the dead letters with
// the status and the start of the response body as its error.
//
// A task whose type has no webhook (no DQ_WEBHOOK_URL, none of its own in
// DQ_WORK_CONFIG) is dead at once with `no handler for task type "<type>"`;
// DQ_UNHANDLED_TYPES=retry retries it with backoff until its last attempt
// instead (a rolling deployment adding the type's webhook).
//
// # Readiness
//
// /readyz answers 200 while the worker consumes (Redis answers, the
// consumer group runs) and every consumed topic (DQ_TOPICS) exists, 503
// otherwise; its body has one line per check ("worker", "kafka topics",
// "kafka dead topic <name>"). A missing dead topic does not make the
// process unready (dead tasks are in Redis; the dead topic is a
// notification): its line says "missing", delayq_work_dead_topic_missing
// is 1 and a WARN is logged (ready.go).
//
// # Rate limits
//
// Per-type limits (window quota, token bucket, concurrency; package
// internal/ratelimit) are read from etcd at DQ_ETCD_ENDPOINTS (default
// 127.0.0.1:2379; the flag -etcd-endpoints "" turns them off) and enforced
// in Redis, shared
// by every work process. Each fetched micro-batch is admitted in one Redis
// round trip; what is over a limit goes back to Redis due when it may pass
// (not an attempt, not a failure).
//
// etcd is not needed to run: the worker starts without waiting for it, and
// until the rules have been listed once its rule snapshot is empty, so every
// type runs unlimited (a warning is logged while the watch retries). Once
// etcd answers, the rules apply within a second; if etcd becomes
// unreachable later, the last rules stay in force. When Redis cannot
// answer the admission check, the batch is deferred a second (fail closed).
package work
