package wire

import (
	"net/http"
)

// Error codes of the API (stable, snake_case; clients match on them).
const (
	CodeInvalidJSON      = "invalid_json"           // 400: body is not one JSON object of the expected shape
	CodeUnknownField     = "unknown_field"          // 400: a field the API does not know (policy: reject)
	CodeUnauthorized     = "unauthorized"           // 401: missing or wrong bearer token
	CodeCrossOrigin      = "cross_origin"           // 403: a browser request from another origin than the daemon's (DQ_ALLOWED_ORIGINS)
	CodeNotFound         = "not_found"              // 404: no such task, dead task or endpoint
	CodeConflict         = "conflict"               // 409: the task's state forbids the operation
	CodeTooLarge         = "too_large"              // 413: body over DQ_MAX_BODY
	CodeBatchTooLarge    = "batch_too_large"        // 413: more tasks than DQ_MAX_BATCH
	CodeRecordTooLarge   = "record_too_large"       // 413: the task's Kafka record would exceed DQ_MAX_RECORD_BYTES
	CodeUnsupportedMedia = "unsupported_media_type" // 415: Content-Type is not application/json
	CodeInvalidTask      = "invalid_task"           // 422: a field has a wrong value (the message names it)
	CodeUnavailable      = "unavailable"            // 503: Redis not reachable and the request cannot be journaled
	CodeOutcomeUnknown   = "outcome_unknown"        // 503: the change ran on the Redis primary but its replicas did not confirm it (DQ_REDIS_REPLICA_ACKS): retry it
	CodeInternal         = "internal"               // 500: an unexpected server-side failure (never bad input)
)

// Error is an error answer: HTTP status plus the body's code and message.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error returns "code: message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// InvalidJSON is the 400 invalid_json answer.
func InvalidJSON(msg string) *Error {
	return &Error{http.StatusBadRequest, CodeInvalidJSON, msg}
}

// InvalidTask is the 422 invalid_task answer.
func InvalidTask(msg string) *Error {
	return &Error{http.StatusUnprocessableEntity, CodeInvalidTask, msg}
}

// NotFound is the 404 not_found answer.
func NotFound(msg string) *Error { return &Error{http.StatusNotFound, CodeNotFound, msg} }

// Conflict is the 409 conflict answer.
func Conflict(msg string) *Error { return &Error{http.StatusConflict, CodeConflict, msg} }

// Unavailable is the 503 unavailable answer.
func Unavailable(msg string) *Error {
	return &Error{http.StatusServiceUnavailable, CodeUnavailable, msg}
}

// OutcomeUnknown is the 503 outcome_unknown answer: a change that the
// Redis primary applied but whose replicas did not confirm it in time
// (DQ_REDIS_REPLICA_ACKS), so a failover may still undo it. Sending the
// same request again is safe and tells.
func OutcomeUnknown(msg string) *Error {
	return &Error{http.StatusServiceUnavailable, CodeOutcomeUnknown, msg}
}

// Unauthorized is the 401 unauthorized answer.
func Unauthorized(msg string) *Error {
	return &Error{http.StatusUnauthorized, CodeUnauthorized, msg}
}

// CrossOrigin is the 403 cross_origin answer: a state-changing request a
// browser sent from a page of another origin (a cross-site form or
// script), which the daemon refuses unless that origin is allowed.
func CrossOrigin(msg string) *Error {
	return &Error{http.StatusForbidden, CodeCrossOrigin, msg}
}

// UnsupportedMediaType is the 415 unsupported_media_type answer.
func UnsupportedMediaType(msg string) *Error {
	return &Error{http.StatusUnsupportedMediaType, CodeUnsupportedMedia, msg}
}

// Internal is the 500 internal answer.
func Internal(msg string) *Error {
	return &Error{http.StatusInternalServerError, CodeInternal, msg}
}

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error *Error `json:"error"`
}

// Codes of the rate-limit endpoints (/v1/limits).
const (
	CodeMethodNotAllowed = "method_not_allowed" // 405: the path exists, not with this method (Allow lists those it takes)
	CodeInvalidRule      = "invalid_rule"       // 422: a rate-limit rule field or the type is wrong (the message names it)
)

// MethodNotAllowed is the 405 method_not_allowed answer; the caller sets
// the Allow header.
func MethodNotAllowed(msg string) *Error {
	return &Error{http.StatusMethodNotAllowed, CodeMethodNotAllowed, msg}
}

// InvalidRule is the 422 invalid_rule answer.
func InvalidRule(msg string) *Error {
	return &Error{http.StatusUnprocessableEntity, CodeInvalidRule, msg}
}

// UnknownField is the 400 unknown_field answer.
func UnknownField(msg string) *Error {
	return &Error{http.StatusBadRequest, CodeUnknownField, msg}
}

// TooLarge is the 413 too_large answer.
func TooLarge(msg string) *Error {
	return &Error{http.StatusRequestEntityTooLarge, CodeTooLarge, msg}
}
