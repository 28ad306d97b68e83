package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/task"
)

// The rate-limit rules of the namespace (package ratelimit keeps the rules,
// their validation and their enforcement):
//
//	GET    /v1/limits         every rule with its usage: {"limits":[{"type","rule","usage"}...]}
//	GET    /v1/limits/{type}  one rule: {"type","rule","usage"}; 404 when none
//	PUT    /v1/limits/{type}  set (create or replace) the rule; body is the rule; answers like GET
//	DELETE /v1/limits/{type}  remove the rule: {"type","deleted":true}; 404 when none
//
// Rules are read from and written to etcd (every worker's watcher applies
// a change within a second). Usage comes from Redis (no limiter: usage is
// null); when Redis fails, usage is null and "usage_error" says why: rules
// stay manageable while Redis is in trouble. Without etcd every /v1/limits
// request answers 503. A rule's "scope" and "unordered" are validated by
// ratelimit (a bad one answers 422 naming the field, as every rule
// field); the usage of a keyed rule adds "active_keys" and its busiest
// values, "keys".

// limitsTimeout bounds each etcd and Redis call of a request, so that an
// unreachable etcd answers 503 instead of hanging.
const limitsTimeout = 5 * time.Second

// limitsAPI serves /v1/limits.
type limitsAPI struct {
	rules   *ratelimit.Rules   // nil: disabled (no etcd)
	lim     *ratelimit.Limiter // nil: usage is not read
	maxBody int64              // of a PUT body
}

// mount registers the limits endpoints on mux.
func (l *limitsAPI) mount(mux *http.ServeMux) {
	mux.Handle("GET /v1/limits", l.handle(l.list))
	mux.Handle("GET /v1/limits/{type}", l.handle(l.get))
	mux.Handle("PUT /v1/limits/{type}", l.handle(l.put))
	mux.Handle("DELETE /v1/limits/{type}", l.handle(l.delete))
	mux.Handle("/v1/limits", l.handle(methodNotAllowed("GET")))
	mux.Handle("/v1/limits/{type}", l.handle(methodNotAllowed("GET, PUT, DELETE")))
	mux.Handle("/v1/limits/", l.handle(func(c *call) (int, any, *wire.Error) {
		return 0, nil, wire.NotFound("no such endpoint: " + task.Truncate(c.URL.Path, 100))
	}))
}

// handle adapts a limits endpoint; without etcd it answers 503.
func (l *limitsAPI) handle(fn endpoint) http.HandlerFunc {
	if l.rules == nil {
		fn = func(*call) (int, any, *wire.Error) {
			return 0, nil, wire.Unavailable("rate limits are disabled: no etcd endpoints configured (DQ_ETCD_ENDPOINTS)")
		}
	}
	return handle(fn)
}

func methodNotAllowed(allow string) endpoint {
	return func(c *call) (int, any, *wire.Error) {
		c.w.Header().Set("Allow", allow)
		return 0, nil, wire.MethodNotAllowed(c.Method + " not allowed; use " + allow)
	}
}

func (l *limitsAPI) list(c *call) (int, any, *wire.Error) {
	ctx, cancel := context.WithTimeout(c.Context(), limitsTimeout)
	defer cancel()
	rules, err := l.rules.List(ctx)
	if err != nil {
		return 0, nil, rulesError(err)
	}
	types := make([]string, 0, len(rules))
	for typ := range rules {
		types = append(types, typ)
	}
	slices.Sort(types)
	views := make([]api.TypeLimit, len(types))
	usage, uerr := l.usageOf(ctx, rules)
	for k, typ := range types {
		views[k] = api.TypeLimit{Type: typ, Rule: api.LimitRule(rules[typ])}
		if uerr != nil {
			views[k].UsageError = uerr.Error()
		} else if u, ok := usage[typ]; ok {
			views[k].Usage = limitUsage(u)
		}
	}
	return http.StatusOK, api.Limits{Limits: views}, nil
}

func (l *limitsAPI) get(c *call) (int, any, *wire.Error) {
	typ, e := limitType(c, ratelimit.ValidateStoredType)
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), limitsTimeout)
	defer cancel()
	rule, found, err := l.rules.Get(ctx, typ)
	if err != nil {
		return 0, nil, rulesError(err)
	}
	if !found {
		return 0, nil, wire.NotFound(fmt.Sprintf("no rate-limit rule for type %q", typ))
	}
	return http.StatusOK, l.view(ctx, typ, rule), nil
}

func (l *limitsAPI) put(c *call) (int, any, *wire.Error) {
	typ, e := limitType(c, ratelimit.ValidateType)
	if e != nil {
		return 0, nil, e
	}
	// the guard refuses it first in the daemon; kept for the endpoint's own sake
	if ct := c.Header.Get("Content-Type"); !wire.IsJSONContentType(ct) {
		return 0, nil, wire.UnsupportedMediaType(fmt.Sprintf("Content-Type %q: must be application/json", task.Truncate(ct, 64)))
	}
	if c.ContentLength > l.maxBody {
		return 0, nil, wire.TooLarge(fmt.Sprintf("body larger than %d bytes", l.maxBody))
	}
	rule, err := ratelimit.DecodeRule(http.MaxBytesReader(c.w, c.Body, l.maxBody), l.maxBody)
	if err != nil {
		return 0, nil, ruleError(err)
	}
	ctx, cancel := context.WithTimeout(c.Context(), limitsTimeout)
	defer cancel()
	if err := l.rules.Put(ctx, typ, rule); err != nil {
		return 0, nil, rulesError(err)
	}
	return http.StatusOK, l.view(ctx, typ, rule), nil
}

func (l *limitsAPI) delete(c *call) (int, any, *wire.Error) {
	typ, e := limitType(c, ratelimit.ValidateStoredType)
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), limitsTimeout)
	defer cancel()
	deleted, err := l.rules.Delete(ctx, typ)
	if err != nil {
		return 0, nil, rulesError(err)
	}
	if !deleted {
		return 0, nil, wire.NotFound(fmt.Sprintf("no rate-limit rule for type %q", typ))
	}
	return http.StatusOK, api.LimitDeleted{Type: typ, Deleted: true}, nil
}

// view is one rule with its usage.
func (l *limitsAPI) view(ctx context.Context, typ string, rule ratelimit.Rule) api.TypeLimit {
	v := api.TypeLimit{Type: typ, Rule: api.LimitRule(rule)}
	usage, err := l.usageOf(ctx, map[string]ratelimit.Rule{typ: rule})
	if err != nil {
		v.UsageError = err.Error()
	} else if u, ok := usage[typ]; ok {
		v.Usage = limitUsage(u)
	}
	return v
}

func (l *limitsAPI) usageOf(ctx context.Context, rules map[string]ratelimit.Rule) (map[string]ratelimit.Usage, error) {
	if l.lim == nil {
		return nil, nil
	}
	return l.lim.UsageOf(ctx, rules)
}

// limitUsage is the wire form of u. A keyed rule's usage also carries its
// active values and the busiest of them, as the Limiter bounded them (the
// daemon adds no bound of its own: it would differ from the console's and
// the CLI's reading of the same rule).
func limitUsage(u ratelimit.Usage) *api.LimitUsage {
	return &api.LimitUsage{WindowCount: u.WindowCount, Tokens: u.Tokens, Running: u.Running, ActiveKeys: u.ActiveKeys, Keys: u.Keys}
}

// limitType reads and checks the {type} path value with validate:
// ValidateType for a rule being set, ValidateStoredType to read or delete
// one that may be stored before ValidateType refused its type ("." and
// ".." arrive here escaped as %2E).
func limitType(c *call, validate func(string) error) (string, *wire.Error) {
	typ := c.PathValue("type")
	if err := validate(typ); err != nil {
		return "", wire.InvalidRule("type: " + err.Error())
	}
	return typ, nil
}

// ruleError answers a ratelimit.DecodeRule error.
func ruleError(err error) *wire.Error {
	switch {
	case errors.Is(err, ratelimit.ErrTooLarge):
		return wire.TooLarge(err.Error())
	case errors.Is(err, ratelimit.ErrUnknownField):
		return wire.UnknownField(err.Error())
	case errors.Is(err, ratelimit.ErrInvalidRule), errors.Is(err, ratelimit.ErrInvalidType):
		return wire.InvalidRule(err.Error())
	}
	return wire.InvalidJSON(err.Error())
}

// rulesError answers an error of ratelimit.Rules.
func rulesError(err error) *wire.Error {
	if errors.Is(err, ratelimit.ErrInvalidRule) || errors.Is(err, ratelimit.ErrInvalidType) {
		return wire.InvalidRule(err.Error())
	}
	// Every other error of Rules comes from clientv3: etcd unreachable,
	// timed out or refusing (no leader, too many requests). Retryable
	// (wire.WriteError adds Retry-After).
	return wire.Unavailable("etcd: " + err.Error())
}
