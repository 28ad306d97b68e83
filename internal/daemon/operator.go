package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The operator endpoints over many tasks:
//
//	GET    /v1/tasks?state=&type=&due_after=&due_before=&limit=&cursor=
//	POST   /v1/tasks/cancel   {"ids":[...]} | {"filter":{"type","due_after","due_before"}}
//	POST   /v1/dead/redrive   {"ids":[...]} | {"filter":{"type"}}
//	DELETE /v1/dead           {"ids":[...]} | {"filter":{"type"}}, or ?type=T without a body
//
// Every bulk names what it changes: ids, or a filter, where the empty
// filter {} is every task; a request that names nothing (no body, {},
// an empty type=) is a 4xx and changes nothing. A type parameter or
// field, where present, is a valid type: an empty one is a 422, never
// "every type".
//
// The list goes by time across every shard (a merge of the shards'
// sorted sets, see redisstore.Store.List) with the store's opaque cursor:
// waiting and paused tasks by due time, dead ones by the time they died,
// succeeded and cancelled ones by the time their record expires (their
// finish time plus the retention), oldest first, then by id; fired and
// delivered tasks, which have no sorted set, shard by shard. A page may
// hold fewer tasks than the limit and still have a next cursor: the store
// examines a bounded number of entries per request. A cursor of an earlier
// daemon, which walked every state shard by shard, is a 422 that says so.
//
// A bulk by filter walks the matching tasks in pages of bulkPage and
// changes each page through the store's by-id scripts; it stops after
// bulkExamined tasks and answers more=true: the same request again goes
// on (the changed tasks have left the walk). Every bulk is safe to repeat:
// a task already changed is not counted again.

const (
	// every list's page size when no limit is given, and the largest
	defaultLimit = 100
	maxLimit     = 1000
	maxCursorLen = 4096
	bulkPage     = 500
)

// bulkExamined is the most tasks one bulk-by-filter request looks at
// (a variable for the tests; 10,000 in production).
var bulkExamined = 10000

// listStates are the states GET /v1/tasks takes ("" = scheduled and retrying).
var listStates = map[string]task.State{
	"":                          "",
	string(task.StateScheduled): task.StateScheduled,
	string(task.StateRetrying):  task.StateRetrying,
	string(task.StateFired):     task.StateFired,
	string(task.StatePaused):    task.StatePaused,
	string(task.StateDead):      task.StateDead,
	string(task.StateSucceeded): task.StateSucceeded,
	string(task.StateCancelled): task.StateCancelled,
	string(task.StateDelivered): task.StateDelivered,
}

// query reads the request's query string strictly: only the names in
// allowed, each at most once, each value valid UTF-8. A bad query is a
// 4xx naming the parameter.
func query(c *call, allowed ...string) (url.Values, *wire.Error) {
	q, err := url.ParseQuery(c.URL.RawQuery)
	if err != nil {
		return nil, wire.InvalidTask("query: not a valid URL query string (" + task.Truncate(err.Error(), 100) + ")")
	}
	for name, vs := range q {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		switch {
		case !known:
			return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeUnknownField,
				Message: fmt.Sprintf("unknown query parameter %q (known: %v)", task.Truncate(name, 64), allowed)}
		case len(vs) > 1:
			return nil, wire.InvalidTask(name + ": given more than once")
		case !utf8.ValidString(vs[0]):
			return nil, wire.InvalidTask(name + ": not valid UTF-8")
		}
	}
	return q, nil
}

// listQuery validates GET /v1/tasks' parameters.
func listQuery(c *call) (redisstore.ListQuery, *wire.Error) {
	var lq redisstore.ListQuery
	q, e := query(c, "state", "type", "due_after", "due_before", "limit", "cursor")
	if e != nil {
		return lq, e
	}
	s := q.Get("state")
	st, ok := listStates[s]
	if !ok {
		return lq, wire.InvalidTask(fmt.Sprintf("state: %q is not one of scheduled, retrying, fired, paused, dead, succeeded, cancelled, delivered (empty: scheduled and retrying)", task.Truncate(s, 32)))
	}
	lq.State = st
	if lq.Type, e = queryType(q, "leave it out to list every type"); e != nil {
		return lq, e
	}
	for _, f := range []struct {
		name string
		p    *time.Time
	}{{"due_after", &lq.DueAfter}, {"due_before", &lq.DueBefore}} {
		if v := q.Get(f.name); v != "" {
			at, e := wire.ParseTime(f.name, v)
			if e != nil {
				return lq, e
			}
			*f.p = at
		}
	}
	var bad string
	if lq.Limit, bad = queryLimit(q); bad != "" {
		return lq, wire.InvalidTask(bad)
	}
	lq.Cursor = q.Get("cursor")
	if len(lq.Cursor) > maxCursorLen {
		return lq, wire.InvalidTask(fmt.Sprintf("cursor: longer than %d bytes; pass next_cursor as it was answered", maxCursorLen))
	}
	return lq, nil
}

// queryType reads an optional type parameter: absent is every type;
// present, it must be a valid type (an empty type= is a 422, with hint
// saying how to mean every type).
func queryType(q url.Values, hint string) (string, *wire.Error) {
	vs, ok := q["type"]
	switch {
	case !ok:
		return "", nil
	case vs[0] == "":
		return "", wire.InvalidTask("type: empty; " + hint)
	}
	if err := wire.ValidType(vs[0]); err != nil {
		return "", wire.InvalidTask("type: " + err.Error())
	}
	return vs[0], nil
}

// deadListQuery validates GET /v1/dead's parameters as strictly as GET
// /v1/tasks': limit only.
func deadListQuery(c *call) (int, *wire.Error) {
	q, e := query(c, "limit")
	if e != nil {
		if e.Code == wire.CodeUnknownField {
			e.Message += "; GET /v1/tasks?state=dead pages through the dead tasks by type and cursor"
		}
		return 0, e
	}
	limit, bad := queryLimit(q)
	if bad != "" {
		return 0, wire.InvalidTask(bad)
	}
	return limit, nil
}

// queryLimit reads an optional limit parameter between 1 and maxLimit
// (defaultLimit when absent); bad says what is wrong with it ("" when
// nothing is), for the caller to answer in its endpoint's error code.
func queryLimit(q url.Values) (limit int, bad string) {
	v := q.Get("limit")
	if v == "" {
		return defaultLimit, ""
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		return 0, fmt.Sprintf("limit: %q is not an integer between 1 and %d", task.Truncate(v, 32), maxLimit)
	}
	return n, ""
}

func (a *App) handleListTasks(c *call) (int, any, *wire.Error) {
	lq, e := listQuery(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var page redisstore.ListPage
	err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
		page, err = st.List(ctx, lq)
		return err
	})
	if err != nil {
		return 0, nil, a.listError(err)
	}
	b := append(make([]byte, 0, 64+len(page.Tasks)*320), `{"tasks":[`...)
	for i, l := range page.Tasks {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = wire.AppendTask(b, l.Task, l.DiedAt); err != nil {
			return 0, nil, a.core.internalError("encode task", err, "task_id", l.Task.ID)
		}
	}
	b = append(b, ']')
	if page.Next != "" {
		cur, err := json.Marshal(page.Next)
		if err != nil {
			return 0, nil, a.core.internalError("encode cursor", err)
		}
		b = append(append(b, `,"next_cursor":`...), cur...)
	}
	return http.StatusOK, append(b, "}\n"...), nil
}

// listError answers an error of Store.List: a cursor the store refuses is
// bad input; anything else is Redis'.
func (a *App) listError(err error) *wire.Error {
	if errors.Is(err, redisstore.ErrBadCursor) {
		return wire.InvalidTask("cursor: not a next_cursor of this query (" + task.Truncate(err.Error(), 120) + "); start again without a cursor")
	}
	return a.bulkStoreError("list", err)
}

// bulkStoreError answers an infrastructure error of a many-task operation:
// never bad input.
func (a *App) bulkStoreError(op string, err error) *wire.Error {
	if errors.Is(err, redisstore.ErrNotReplicated) {
		return wire.OutcomeUnknown(op + ": changes ran on the Redis primary but its replicas did not confirm them in time (DQ_REDIS_REPLICA_ACKS); send the request again")
	}
	if redisstore.IsUnavailable(err) {
		return wire.Unavailable("redis is " + redisCondition(err))
	}
	return a.core.internalError(op, err)
}

// bulkResult is the answer of every bulk endpoint.
type bulkResult struct {
	Changed int  `json:"changed"`
	More    bool `json:"more"`
}

// manyFunc is one of the store's by-id bulk operations.
type manyFunc func(st *redisstore.Store) func(ctx context.Context, ids []string) (int, error)

func redriveMany(st *redisstore.Store) func(context.Context, []string) (int, error) {
	return st.RedriveMany
}

func deleteDeadMany(st *redisstore.Store) func(context.Context, []string) (int, error) {
	return st.DeleteDeadMany
}

func (a *App) handleCancelMany(c *call) (int, any, *wire.Error) {
	return a.bulkBody(c, "cancel", true, a.cancelMany, task.State(""), task.StatePaused)
}

func (a *App) handleRedriveMany(c *call) (int, any, *wire.Error) {
	return a.bulkBody(c, "redrive", false, redriveMany, task.StateDead)
}

// handleDeleteDeadMany is DELETE /v1/dead: the body of POST
// /v1/dead/redrive ({"ids":[...]} or {"filter":{"type":"T"}}, {"filter":{}}
// for every dead task), or, without a body, ?type=T (what clients sent
// before the body, the same as {"filter":{"type":"T"}}). Nothing else:
// no body and no type, an empty type= or both are 4xx and delete nothing.
func (a *App) handleDeleteDeadMany(c *call) (int, any, *wire.Error) {
	q, e := query(c, "type")
	if e != nil {
		return 0, nil, e
	}
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	var req wire.Bulk
	_, byType := q["type"]
	switch empty := len(bytes.TrimSpace(body)) == 0; {
	case byType && !empty:
		return 0, nil, wire.InvalidTask("type, body: name the dead tasks once, in the body or with ?type=, not both")
	case byType:
		typ, e := queryType(q, `name a type, or send the body {"filter":{}} to delete every dead task`)
		if e != nil {
			return 0, nil, e
		}
		req.Filter = &wire.Filter{Type: typ}
	case empty:
		return 0, nil, wire.InvalidTask(`ids, filter: the body is empty; name the dead tasks to delete: {"ids":[...]}, {"filter":{"type":"T"}}, or {"filter":{}} for every dead task`)
	default:
		if req, e = wire.DecodeBulk(body, false); e != nil {
			return 0, nil, e
		}
	}
	return a.bulk(c.Context(), "delete dead", deleteDeadMany, req, task.StateDead)
}

// bulkBody runs a bulk endpoint with a body: by ids, or by a filter over
// the states (walked in order).
func (a *App) bulkBody(c *call, op string, times bool, fn manyFunc, states ...task.State) (int, any, *wire.Error) {
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	req, e := wire.DecodeBulk(body, times)
	if e != nil {
		return 0, nil, e
	}
	return a.bulk(c.Context(), op, fn, req, states...)
}

// bulk applies fn to the tasks req names: its ids, or the tasks of the
// states (walked in order) that match its filter.
func (a *App) bulk(ctx context.Context, op string, fn manyFunc, req wire.Bulk, states ...task.State) (int, any, *wire.Error) {
	st, e := a.core.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var res bulkResult
	if req.Filter != nil {
		res, e = a.bulkFilter(ctx, op, st, fn, *req.Filter, states...)
	} else {
		res, e = a.bulkIDs(ctx, op, st, fn, req.IDs)
	}
	if e != nil {
		return 0, nil, e
	}
	return http.StatusOK, res, nil
}

// bulkIDs applies fn to ids in pages. An id with a journaled schedule is
// not in Redis yet (or only in an older version): like the single-task
// endpoints, the request then answers 503 until the journal replayed it.
func (a *App) bulkIDs(ctx context.Context, op string, st *redisstore.Store, fn manyFunc, ids []string) (bulkResult, *wire.Error) {
	var res bulkResult
	if a.core.journalDepth() > 0 {
		for _, id := range ids {
			if _, ok, e := a.core.journaled(ctx, id); e != nil {
				return res, e
			} else if ok {
				return res, wire.Unavailable("task " + id + " is journaled (redis was unreachable); retry once it is replayed")
			}
		}
	}
	for start := 0; start < len(ids); start += bulkPage {
		page := ids[start:min(start+bulkPage, len(ids))]
		n, err := a.applyPage(ctx, st, fn, page)
		res.Changed += n
		if err != nil {
			return res, a.bulkStoreError(op, err)
		}
	}
	a.log.Debug("bulk by ids", "op", op, "ids", len(ids), "changed", res.Changed)
	return res, nil
}

// applyPage applies fn to one page of ids. DQ_REDIS_TIMEOUT bounds one
// Redis operation; a page is ceil(len/BulkWorkers) rounds of by-id calls
// (redisstore.Store.bulk), so each round gets that bound: one timeout for
// the whole page answered 503 "redis is timed out", half applied, for a
// page of 20 cancels on a loaded machine while Redis was healthy.
func (a *App) applyPage(ctx context.Context, st *redisstore.Store, fn manyFunc, ids []string) (int, error) {
	rounds := (len(ids) + redisstore.BulkWorkers - 1) / redisstore.BulkWorkers
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(max(rounds, 1))*a.cfg.RedisTimeout)
	defer cancel()
	n, err := fn(st)(octx, ids)
	a.core.noteStore(err)
	return n, err
}

// bulkFilter walks the tasks of each state that match f, page by page,
// and applies fn to each page, until bulkExamined tasks were looked at
// (more=true) or every walk is complete. Schedules still in the journal
// are not in Redis, where the walk looks: while the journal is not empty
// the request answers 503 (a "cancel every task of type t" must not miss
// the ones a replay will store a moment later).
func (a *App) bulkFilter(ctx context.Context, op string, st *redisstore.Store, fn manyFunc, f wire.Filter, states ...task.State) (bulkResult, *wire.Error) {
	var res bulkResult
	if n := a.core.journalDepth(); n > 0 && slices.Contains(states, "") {
		return res, wire.Unavailable(fmt.Sprintf("%d schedules are journaled (redis was unreachable) and not in redis yet; retry once they are replayed", n))
	}
	examined := 0
	for _, state := range states {
		q := redisstore.ListQuery{State: state, Type: f.Type, DueAfter: f.DueAfter, DueBefore: f.DueBefore}
		for {
			if examined >= bulkExamined {
				res.More = true
				a.log.Debug("bulk by filter stopped early", "op", op, "examined", examined, "changed", res.Changed)
				return res, nil
			}
			// (A cursor holds a position, not the limit: the last page
			// asks for what the bound leaves.)
			q.Limit = min(bulkPage, bulkExamined-examined)
			var page redisstore.ListPage
			err := a.core.inStore(ctx, func(ctx context.Context) (err error) {
				page, err = st.List(ctx, q)
				return err
			})
			if err != nil {
				return res, a.bulkStoreError(op, err)
			}
			if len(page.Tasks) > 0 {
				ids := make([]string, len(page.Tasks))
				for i, l := range page.Tasks {
					ids[i] = l.Task.ID
				}
				examined += len(ids)
				var n int
				n, err = a.applyPage(ctx, st, fn, ids)
				res.Changed += n
				if err != nil {
					return res, a.bulkStoreError(op, err)
				}
			}
			if page.Next == "" {
				break
			}
			q.Cursor = page.Next
		}
	}
	a.log.Debug("bulk by filter", "op", op, "examined", examined, "changed", res.Changed)
	return res, nil
}
