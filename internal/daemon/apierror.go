package daemon

import (
	"net/http"
)

// Error codes of the API (stable, snake_case; clients match on them).
const (
	codeInvalidJSON      = "invalid_json"           // 400: body is not one JSON object of the expected shape
	codeUnknownField     = "unknown_field"          // 400: a field the API does not know (policy: reject)
	codeUnauthorized     = "unauthorized"           // 401: missing or wrong bearer token
	codeNotFound         = "not_found"              // 404: no such task, dead task or endpoint
	codeConflict         = "conflict"               // 409: the task's state forbids the operation
	codeTooLarge         = "too_large"              // 413: body over DQ_MAX_BODY
	codeBatchTooLarge    = "batch_too_large"        // 413: more tasks than DQ_MAX_BATCH
	codeUnsupportedMedia = "unsupported_media_type" // 415: Content-Type is not application/json
	codeInvalidTask      = "invalid_task"           // 422: a field has a wrong value (the message names it)
	codeUnavailable      = "unavailable"            // 503: Redis not reachable and the request cannot be journaled
	codeInternal         = "internal"               // 500: an unexpected server-side failure (never bad input)
)

// apiError is an error answer: HTTP status plus the body's code and message.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errInvalidJSON(msg string) *apiError {
	return &apiError{http.StatusBadRequest, codeInvalidJSON, msg}
}

func errInvalidTask(msg string) *apiError {
	return &apiError{http.StatusUnprocessableEntity, codeInvalidTask, msg}
}

func errNotFound(msg string) *apiError { return &apiError{http.StatusNotFound, codeNotFound, msg} }

func errConflict(msg string) *apiError { return &apiError{http.StatusConflict, codeConflict, msg} }

func errUnavailable(msg string) *apiError {
	return &apiError{http.StatusServiceUnavailable, codeUnavailable, msg}
}

func errInternal(msg string) *apiError {
	return &apiError{http.StatusInternalServerError, codeInternal, msg}
}

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error *apiError `json:"error"`
}
