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
//	Dq-Signature   sha256=<hex> (only when DQ_WEBHOOK_SECRET is set)
//
// The signature is the lower-case hex HMAC-SHA256, keyed with
// DQ_WEBHOOK_SECRET, of the string
//
//	<Dq-Id> + "." + <Dq-Attempt as decimal> + "." + <body bytes>
//
// A receiver recomputes it over the raw body and compares in constant time.
//
// Responses: 2xx is done. 408, 429 and 5xx are retried, after the
// Retry-After header's delay when it is given (seconds or an HTTP date),
// otherwise with the worker's backoff; so are timeouts and connection
// errors. Every other status (3xx — redirects are not followed — and the
// other 4xx) is a permanent failure: the task goes to the dead letters with
// the status and the start of the response body as its error.
package work
