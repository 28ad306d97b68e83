package daemon

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The task-type endpoints:
//
//	GET  /v1/types                every known type: paused?, since when, parked count, limit rule
//	POST /v1/types/{type}/pause   mark the type paused in etcd (package pause)
//	POST /v1/types/{type}/resume  mark it running, then unpark its parked tasks at once
//
// A type is known when it is paused, has a rate-limit rule, has parked
// tasks, or was scheduled through this daemon since it started (at most
// maxSeenTypes of those are remembered). Pause state and rules live in
// etcd: without DQ_ETCD_ENDPOINTS these endpoints answer 503.

// etcdTimeout bounds the etcd reads and writes of one request, so that an
// unreachable etcd answers 503 (or names itself in /v1/cluster) instead
// of hanging.
const etcdTimeout = 3 * time.Second

// maxSeenTypes bounds the types a daemon remembers having scheduled.
const maxSeenTypes = 1000

// seenTypes is the set of task types this daemon scheduled. The schedule
// path reads it without a lock or an allocation (an immutable map behind
// an atomic pointer); a new type copies the map, which happens at most
// maxSeenTypes times.
type seenTypes struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]struct{}]
}

// note remembers typ (cheap when it is known or the set is full).
func (s *seenTypes) note(typ string) {
	if m := s.m.Load(); m != nil {
		if _, ok := (*m)[typ]; ok || len(*m) >= maxSeenTypes {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if _, ok := (*old)[typ]; ok || len(*old) >= maxSeenTypes {
			return
		}
	}
	var n int
	if old != nil {
		n = len(*old)
	}
	m := make(map[string]struct{}, n+1)
	if old != nil {
		for k := range *old {
			m[k] = struct{}{}
		}
	}
	m[strings.Clone(typ)] = struct{}{}
	s.m.Store(&m)
}

// list returns the remembered types.
func (s *seenTypes) list() []string {
	m := s.m.Load()
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(*m))
	for k := range *m {
		out = append(out, k)
	}
	return out
}

// etcdFor returns the etcd client, or the 503 answer when none is
// configured; what names what needs it.
func (a *App) etcdFor(what string) (*clientv3.Client, *wire.Error) {
	if a.etcd == nil {
		return nil, wire.Unavailable(what + " live in etcd: no etcd endpoints configured (DQ_ETCD_ENDPOINTS)")
	}
	return a.etcd, nil
}

// etcdError answers an error of an etcd call: never bad input.
func etcdError(err error) *wire.Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return wire.Unavailable("etcd did not answer within " + etcdTimeout.String())
	}
	return wire.Unavailable("etcd: " + task.Truncate(err.Error(), 200))
}

func (a *App) handleListTypes(c *call) (int, any, *wire.Error) {
	cli, e := a.etcdFor("pause states and rate-limit rules")
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), etcdTimeout)
	defer cancel()
	paused, err := pause.List(ctx, cli, a.cfg.Namespace)
	if err != nil {
		return 0, nil, etcdError(err)
	}
	rules, err := ratelimit.NewRules(cli, a.cfg.Namespace, a.log)
	if err != nil {
		return 0, nil, a.core.internalError("rules", err)
	}
	limits, err := rules.List(ctx)
	if err != nil {
		return 0, nil, etcdError(err)
	}
	var parked map[string]int64
	if err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
		parked, err = st.ParkedTypes(ctx)
		return err
	}); err != nil {
		return 0, nil, a.bulkStoreError("parked types", err)
	}
	views := make(map[string]*api.TypeInfo)
	view := func(typ string) *api.TypeInfo {
		v := views[typ]
		if v == nil {
			v = &api.TypeInfo{Type: typ}
			views[typ] = v
		}
		return v
	}
	for _, typ := range a.core.seen.list() {
		view(typ)
	}
	for typ, at := range paused {
		v := view(typ)
		v.Paused, v.PausedAt = true, at
	}
	for typ, rule := range limits {
		view(typ).Limit = (*api.LimitRule)(&rule)
	}
	for typ, n := range parked {
		view(typ).Parked = n
	}
	out := api.Types{Types: make([]api.TypeInfo, 0, len(views))}
	for _, v := range views {
		out.Types = append(out.Types, *v)
	}
	slices.SortFunc(out.Types, func(x, y api.TypeInfo) int { return strings.Compare(x.Type, y.Type) })
	return http.StatusOK, out, nil
}

// pathType reads and checks the {type} path value of a pause being set
// (op is pause.Pause): task.ValidateType, the rule of a new task's type,
// so no pause is set that the API could not name ("." and "..") — or of a
// resume: pause.ValidateStoredType, since the type may have been paused
// before that rule ("." and ".." arrive here escaped as %2E).
func pathType(c *call, pausing bool) (string, *wire.Error) {
	typ := c.PathValue("type")
	if pausing {
		if err := task.ValidateType(typ); err != nil {
			return "", wire.InvalidTask(wire.ValidationMessage(err))
		}
	}
	if err := pause.ValidateStoredType(typ); err != nil {
		return "", wire.InvalidTask("type: " + strings.TrimPrefix(err.Error(), pause.ErrInvalidType.Error()+" "))
	}
	return typ, nil
}

type pauseResult struct {
	Type    string `json:"type"`
	Paused  bool   `json:"paused"`
	Changed bool   `json:"changed"`
}

func (a *App) handlePauseType(c *call) (int, any, *wire.Error) {
	typ, changed, e := a.setPause(c, true, pause.Pause)
	if e != nil {
		return 0, nil, e
	}
	if changed {
		a.log.Info("task type paused", "type", typ)
	}
	return http.StatusOK, pauseResult{Type: typ, Paused: true, Changed: changed}, nil
}

// setPause runs op (pause.Pause, pausing true, or pause.Resume) on the
// path's type.
func (a *App) setPause(c *call, pausing bool, op func(context.Context, *clientv3.Client, string, string) (bool, error)) (typ string, changed bool, e *wire.Error) {
	if typ, e = pathType(c, pausing); e != nil {
		return "", false, e
	}
	cli, e := a.etcdFor("pause states")
	if e != nil {
		return "", false, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), etcdTimeout)
	defer cancel()
	changed, err := op(ctx, cli, a.cfg.Namespace, typ)
	if err != nil {
		return "", false, etcdError(err)
	}
	return typ, changed, nil
}

type resumeResult struct {
	Type    string `json:"type"`
	Paused  bool   `json:"paused"`
	Changed bool   `json:"changed"`
	Resumed int    `json:"resumed"`
	// UnparkError says why the parked tasks could not be put back now
	// (Redis); every work process unparks them within 10 s anyway.
	UnparkError string `json:"unpark_error,omitempty"`
}

// handleResumeType marks the type running in etcd, then unparks its
// parked tasks at once (always, even when it was not paused: a park that
// raced an earlier resume is put back too). Redis failing after etcd took
// the resume is not an error of the request: the work processes'
// reconcilers unpark within 10 s; unpark_error says so.
func (a *App) handleResumeType(c *call) (int, any, *wire.Error) {
	typ, changed, e := a.setPause(c, false, pause.Resume)
	if e != nil {
		return 0, nil, e
	}
	res := resumeResult{Type: typ, Changed: changed}
	if st, e := a.core.storeFor(); e != nil {
		res.UnparkError = e.Message
	} else if err := a.unpark(c.Context(), st, typ, &res.Resumed); err != nil {
		res.UnparkError = "redis " + redisCondition(err) + "; the work processes unpark them within 10s"
		a.log.Warn("unpark after resume", "type", typ, "error", err)
	}
	if changed || res.Resumed > 0 {
		a.log.Info("task type resumed", "type", typ, "unparked", res.Resumed)
	}
	return http.StatusOK, res, nil
}

// unparkTimeout bounds the unpark of one resume: it moves the type's
// parked tasks in pages of 500, so it may take longer than one Redis
// operation (DQ_REDIS_TIMEOUT).
const unparkTimeout = 30 * time.Second

// unpark puts typ's parked tasks back, counting them into *moved (also
// when it fails half-way). Its error does not mark Redis down unless Redis
// did not answer at all: a long unpark running out of time says nothing
// about Redis' health.
func (a *App) unpark(ctx context.Context, st *redisstore.Store, typ string, moved *int) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unparkTimeout)
	defer cancel()
	n, err := st.Unpark(uctx, typ)
	*moved = n
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		a.core.noteStore(err)
	}
	return err
}
