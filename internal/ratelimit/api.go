package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/task"
)

// API error codes (the daemon's, same body shape {"error":{"code","message"}}).
const (
	codeInvalidJSON      = "invalid_json"           // 400
	codeUnknownField     = "unknown_field"          // 400
	codeNotFound         = "not_found"              // 404
	codeMethod           = "method_not_allowed"     // 405
	codeTooLarge         = "too_large"              // 413
	codeUnsupportedMedia = "unsupported_media_type" // 415
	codeInvalidRule      = "invalid_rule"           // 422: a rule field or the type is wrong (the message names it)
	codeUnavailable      = "unavailable"            // 503: etcd not reachable
	codeInternal         = "internal"               // 500
)

// apiTimeout bounds each etcd and Redis call of a request, so that an
// unreachable etcd answers 503 instead of hanging.
const apiTimeout = 5 * time.Second

type api struct {
	rules   *Rules
	lim     *Limiter
	maxBody int64
}

// NewAPI serves the rate-limit rules of the namespace:
//
//	GET    /v1/limits         every rule with its usage: {"limits":[{"type","rule","usage"}...]}
//	GET    /v1/limits/{type}  one rule: {"type","rule","usage"}; 404 when none
//	PUT    /v1/limits/{type}  set (create or replace) the rule; body is the rule; answers like GET
//	DELETE /v1/limits/{type}  remove the rule: {"type","deleted":true}; 404 when none
//
// Rules are read from and written to etcd (every worker's watcher applies a
// change within a second). Usage comes from Redis through lim (nil: usage is
// null); when Redis fails, usage is null and "usage_error" says why — rules
// stay manageable while Redis is in trouble. maxBody bounds a PUT body
// (<= 0: 64 KiB). Errors use the daemon's shape {"error":{"code","message"}}.
//
// The daemon mounts it with mux.Handle("/v1/limits", h) and
// mux.Handle("/v1/limits/", h), behind its auth middleware.
func NewAPI(rules *Rules, lim *Limiter, maxBody int64) http.Handler {
	if maxBody <= 0 {
		maxBody = DefaultMaxRaw
	}
	a := &api{rules: rules, lim: lim, maxBody: maxBody}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/limits", a.list)
	mux.HandleFunc("GET /v1/limits/{type}", a.get)
	mux.HandleFunc("PUT /v1/limits/{type}", a.put)
	mux.HandleFunc("DELETE /v1/limits/{type}", a.delete)
	mux.HandleFunc("/v1/limits", methodNotAllowed("GET"))
	mux.HandleFunc("/v1/limits/{type}", methodNotAllowed("GET, PUT, DELETE"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+task.Truncate(r.URL.Path, 100))
	})
	return mux
}

// limitView is the JSON of one rule with its usage.
type limitView struct {
	Type       string `json:"type"`
	Rule       Rule   `json:"rule"`
	Usage      *Usage `json:"usage"`
	UsageError string `json:"usage_error,omitempty"`
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	rules, err := a.rules.List(ctx)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	types := make([]string, 0, len(rules))
	for typ := range rules {
		types = append(types, typ)
	}
	slices.Sort(types)
	views := make([]limitView, len(types))
	usage, uerr := a.usageOf(ctx, rules)
	for k, typ := range types {
		views[k] = limitView{Type: typ, Rule: rules[typ]}
		if uerr != nil {
			views[k].UsageError = uerr.Error()
		} else if u, ok := usage[typ]; ok {
			views[k].Usage = &u
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Limits []limitView `json:"limits"`
	}{views})
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r, ValidateStoredType)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	rule, found, err := a.rules.Get(ctx, typ)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no rate-limit rule for type %q", typ))
		return
	}
	writeJSON(w, http.StatusOK, a.view(ctx, typ, rule))
}

func (a *api) put(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r, ValidateType)
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		writeError(w, http.StatusUnsupportedMediaType, codeUnsupportedMedia,
			fmt.Sprintf("Content-Type %q: must be application/json", task.Truncate(ct, 64)))
		return
	}
	if r.ContentLength > a.maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, fmt.Sprintf("body larger than %d bytes", a.maxBody))
		return
	}
	rule, err := DecodeRule(http.MaxBytesReader(w, r.Body, a.maxBody), a.maxBody)
	if err != nil {
		writeRuleError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	if err := a.rules.Put(ctx, typ, rule); err != nil {
		writeStoreError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(ctx, typ, rule))
}

func (a *api) delete(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r, ValidateStoredType)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	deleted, err := a.rules.Delete(ctx, typ)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	if !deleted {
		writeError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no rate-limit rule for type %q", typ))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Type    string `json:"type"`
		Deleted bool   `json:"deleted"`
	}{typ, true})
}

func (a *api) view(ctx context.Context, typ string, rule Rule) limitView {
	v := limitView{Type: typ, Rule: rule}
	usage, err := a.usageOf(ctx, map[string]Rule{typ: rule})
	if err != nil {
		v.UsageError = err.Error()
	} else if u, ok := usage[typ]; ok {
		v.Usage = &u
	}
	return v
}

func (a *api) usageOf(ctx context.Context, rules map[string]Rule) (map[string]Usage, error) {
	if a.lim == nil {
		return nil, nil
	}
	return a.lim.UsageOf(ctx, rules)
}

// pathType reads and checks the {type} path value with validate:
// ValidateType for a rule being set, ValidateStoredType to read or delete
// one that may be stored before ValidateType refused its type ("." and
// ".." arrive here escaped as %2E).
func pathType(w http.ResponseWriter, r *http.Request, validate func(string) error) (string, bool) {
	typ := r.PathValue("type")
	if err := validate(typ); err != nil {
		writeError(w, http.StatusUnprocessableEntity, codeInvalidRule, "type: "+err.Error())
		return "", false
	}
	return typ, true
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, codeMethod, r.Method+" not allowed; use "+allow)
	}
}

func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// writeRuleError answers a DecodeRule error.
func writeRuleError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, err.Error())
	case errors.Is(err, ErrUnknownField):
		writeError(w, http.StatusBadRequest, codeUnknownField, err.Error())
	case errors.Is(err, ErrInvalidRule), errors.Is(err, ErrInvalidType):
		writeError(w, http.StatusUnprocessableEntity, codeInvalidRule, err.Error())
	default:
		writeError(w, http.StatusBadRequest, codeInvalidJSON, err.Error())
	}
}

// writeStoreError answers an error of Rules.
func writeStoreError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrInvalidRule), errors.Is(err, ErrInvalidType):
		writeError(w, http.StatusUnprocessableEntity, codeInvalidRule, err.Error())
	default:
		// Every other error of Rules comes from clientv3: etcd unreachable,
		// timed out or refusing (no leader, too many requests). Retryable.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "etcd: "+err.Error())
	}
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{apiError{code, msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(struct {
			Error apiError `json:"error"`
		}{apiError{codeInternal, "encode response: " + err.Error()}})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
