package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/daemon/console"
	"github.com/delayq/delayq/internal/daemon/journal"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The HTTP API. Every /v1 answer is JSON; errors are
// {"error":{"code","message"}} (codes in wire/error.go). Bad input is a
// 4xx and changes nothing. Each endpoint is a function from the request
// to its answer (see handle); the wire package decodes and encodes.
//
// Redis unavailable: schedules are journaled (202); on a Redis Cluster
// only those of the shards whose master is unavailable (see App.schedule).
// Reads and PATCH/DELETE/redrive answer 503 unavailable with Retry-After:
// they cannot be journaled without breaking what they answer (by id: when
// the id's shard is known down). A PATCH or DELETE of an id that still has
// an entry in the journal also answers 503 until the entry is replayed, so
// it cannot act on an older version in Redis. GET /v1/stats always answers
// 200, with redis_up (a cluster: some master answers), shards_down and
// journal_depth, so operators can watch a journal drain during an outage.

func (a *App) routes() http.Handler {
	mux := http.NewServeMux()
	admin.MountReport(mux, a.reg, a.report)
	mux.Handle("POST /v1/tasks", handle(a.handleSchedule))
	mux.Handle("POST /v1/tasks/batch", handle(a.handleBatch))
	mux.Handle("GET /v1/tasks", handle(a.handleListTasks))
	mux.Handle("POST /v1/tasks/cancel", handle(a.handleCancelMany))
	mux.Handle("GET /v1/tasks/{id}", handle(a.handleGet))
	mux.Handle("PATCH /v1/tasks/{id}", handle(a.handleReschedule))
	mux.Handle("DELETE /v1/tasks/{id}", handle(a.handleCancel))
	mux.Handle("GET /v1/stats", handle(a.handleStats))
	mux.Handle("GET /v1/dead", handle(a.handleListDead))
	mux.Handle("DELETE /v1/dead", handle(a.handleDeleteDeadMany))
	mux.Handle("POST /v1/dead/redrive", handle(a.handleRedriveMany))
	mux.Handle("POST /v1/dead/{id}/redrive", handle(a.handleRedrive))
	mux.Handle("DELETE /v1/dead/{id}", handle(a.handleDeleteDead))
	mux.Handle("GET /v1/shards", handle(a.handleGetShards))
	mux.Handle("PUT /v1/shards", handle(a.handlePutShards))
	mux.Handle("GET /v1/types", handle(a.handleListTypes))
	mux.Handle("POST /v1/types/{type}/pause", handle(a.handlePauseType))
	mux.Handle("POST /v1/types/{type}/resume", handle(a.handleResumeType))
	mux.Handle("GET /v1/cluster", handle(a.handleCluster))
	mux.Handle("DELETE /v1/cluster/worked/{topic}", handle(a.handleForgetWorkedTopic))
	mux.Handle("GET /v1/schedules", handle(a.handleListSchedules))
	mux.Handle("PUT /v1/schedules/{id}", handle(a.handlePutSchedule))
	mux.Handle("GET /v1/schedules/{id}", handle(a.handleGetSchedule))
	mux.Handle("DELETE /v1/schedules/{id}", handle(a.handleDeleteSchedule))
	mux.Handle("POST /v1/schedules/{id}/pause", handle(a.handlePauseSchedule))
	mux.Handle("POST /v1/schedules/{id}/resume", handle(a.handleResumeSchedule))
	mux.HandleFunc("GET /v1/openapi.yaml", serveOpenAPI)
	mux.Handle("/v1/limits", a.limits)
	mux.Handle("/v1/limits/", a.limits)
	mux.Handle("GET /ui/", console.Handler()) // the operator console: static assets, no token (its /v1 calls carry it)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, wire.NotFound(fmt.Sprintf("no endpoint %s %s", r.Method, task.Truncate(r.URL.Path, 100))))
	})
	return observed(&server{app: a, mux: mux, origins: a.crossOrigin()})
}

// crossOrigin is the check that refuses state-changing requests a browser
// sends from a page of another origin, DQ_ALLOWED_ORIGINS excepted.
func (a *App) crossOrigin() *http.CrossOriginProtection {
	cop := http.NewCrossOriginProtection()
	for _, o := range a.cfg.AllowedOrigins {
		if err := cop.AddTrustedOrigin(canonicalOrigin(o)); err != nil {
			// Config.Validate refuses what AddTrustedOrigin would
			a.log.Error("allowed origin ignored", "origin", o, "error", err)
		}
	}
	return cop
}

// canonicalOrigin writes an allowed origin as a browser's Origin header
// does: scheme and host in lower case, no default port, no trailing "/".
func canonicalOrigin(o string) string {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil {
		return o
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	switch scheme {
	case "https":
		host = strings.TrimSuffix(host, ":443")
	case "http":
		host = strings.TrimSuffix(host, ":80")
	}
	return scheme + "://" + host
}

// server wraps the mux with the checks of every /v1 request (guard),
// panic recovery, metrics and the per-request debug log.
type server struct {
	app     *App
	mux     *http.ServeMux
	origins *http.CrossOriginProtection
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := s.app
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler { //nolint:errorlint // p is recover()'s value, not an error chain: net/http panics with this exact value and compares it the same way
					panic(p)
				}
				a.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p)
				if sw.code == 0 {
					wire.WriteError(sw, wire.Internal("internal error"))
				}
			}
		}()
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			if e := s.guard(r); e != nil {
				_, r.Pattern = s.mux.Handler(r) // the metrics' route label
				wire.WriteError(sw, e)
				return
			}
		}
		s.mux.ServeHTTP(sw, r)
	}()
	route := r.Pattern
	if route == "" {
		route = "unmatched"
	}
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	d := time.Since(start)
	a.m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
	a.m.duration.WithLabelValues(route).Observe(d.Seconds())
	if a.log.Enabled(r.Context(), slog.LevelDebug) {
		a.log.Debug("request", "method", r.Method, "route", route, "path", r.URL.Path, "status", sw.code, "duration_ms", float64(d.Microseconds())/1000)
	}
}

// guard is the check of every /v1 request before it is routed; nil lets
// it through. In order:
//
//  1. the bearer token, when one is set (401);
//  2. a write (POST, PUT, PATCH, DELETE: any method but GET, HEAD and
//     OPTIONS) that a browser sent from a page of another origin than
//     the daemon's own or DQ_ALLOWED_ORIGINS' is refused (403
//     cross_origin; net/http's CrossOriginProtection reads
//     Sec-Fetch-Site, else Origin against Host). Clients that are not
//     browsers send neither header and pass;
//  3. a write must say Content-Type: application/json, body or not
//     (415): a cross-site HTML form can only send a form or text type,
//     and a script's fetch with a JSON type needs a CORS preflight,
//     which the daemon never grants. This also stops the forms of
//     browsers too old to send Origin.
//
// Each decision reads only the method and the headers, the same for
// every /v1 path, routed or not: no answer tells whether a route exists
// (an unknown route is a 404 only once the request passed all three).
// The token goes first: a caller without it learns nothing else.
func (s *server) guard(r *http.Request) *wire.Error {
	if !s.authorized(r) {
		return wire.Unauthorized("missing or wrong bearer token (Authorization: Bearer <DQ_API_TOKEN>)")
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil // reads; any other method counts as a write
	}
	if err := s.origins.Check(r); err != nil {
		origin := r.Header.Get("Origin")
		if origin == "" {
			origin = "Sec-Fetch-Site " + r.Header.Get("Sec-Fetch-Site")
		}
		return wire.CrossOrigin(fmt.Sprintf("%s %s from a browser page of another origin (%s): refused; the daemon accepts changes from its own origin and DQ_ALLOWED_ORIGINS",
			r.Method, task.Truncate(r.URL.Path, 100), task.Truncate(origin, 100)))
	}
	if ct := r.Header.Get("Content-Type"); !wire.IsJSONContentType(ct) {
		return wire.UnsupportedMediaType(fmt.Sprintf("Content-Type %q: every POST, PUT, PATCH and DELETE must send Content-Type: application/json, with or without a body",
			task.Truncate(ct, 64)))
	}
	return nil
}

// authorized checks the bearer token in constant time (when one is set).
// The scheme is case-insensitive (RFC 9110 section 11.1): "bearer" and
// "BEARER" are "Bearer".
func (s *server) authorized(r *http.Request) bool {
	want := s.app.cfg.APIToken
	if want == "" {
		return true
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got = strings.TrimLeft(got, " ") // 1*SP between scheme and token
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// --- the handler adapter ---

// call is one request as an endpoint sees it.
type call struct {
	*http.Request
	w    http.ResponseWriter
	bufs []*bytes.Buffer // lent by buf until the answer is written
}

// endpoint is one endpoint's logic: it returns the answer's status and
// body ([]byte: JSON written as is; anything else: encoded with
// encoding/json), or the error answer.
type endpoint func(c *call) (status int, body any, e *wire.Error)

// handle adapts an endpoint to net/http: it writes the answer or the
// error, then takes back the buffers the endpoint borrowed.
func handle(fn endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := &call{Request: r, w: w}
		defer c.release()
		status, body, e := fn(c)
		if e != nil {
			wire.WriteError(w, e)
			return
		}
		if b, ok := body.([]byte); ok {
			wire.WriteRaw(w, status, b)
			return
		}
		wire.WriteJSON(w, status, body)
	}
}

// body reads the request's JSON body within limit into buf.
func (c *call) body(limit int64, buf *bytes.Buffer) ([]byte, *wire.Error) {
	return wire.ReadJSONBody(c.w, c.Request, limit, buf)
}

// buf lends a pooled buffer until the answer is written. The batch
// endpoint's request and response buffers are hundreds of kilobytes
// each. A task's payload points into the request buffer, so a buffer
// goes back to the pool only once the request is answered: nothing keeps
// a task beyond its request (the store and the journal copy what they
// keep).
func (c *call) buf() *bytes.Buffer {
	b := bufPool.Get().(*bytes.Buffer)
	c.bufs = append(c.bufs, b)
	return b
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (c *call) release() {
	for _, b := range c.bufs {
		if b.Cap() > 8<<20 {
			continue
		}
		b.Reset()
		bufPool.Put(b)
	}
}

// inStore runs one store operation under the op context (opContext) and
// records what its error says about Redis.
func (a *App) inStore(ctx context.Context, op func(ctx context.Context) error) error {
	octx, cancel := a.opContext(ctx)
	defer cancel()
	err := op(octx)
	a.noteStore(err)
	return err
}

// --- schedule ---

func (a *App) handleSchedule(c *call) (int, any, *wire.Error) {
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	res := a.ScheduleTask(c.Context(), body)
	s := &res
	if s.Err != nil {
		return 0, nil, s.Err
	}
	a.log.Debug("task scheduled", "task_id", s.ID, "outcome", s.Outcome, "due_at", s.DueAt)
	return s.Status(), append(wire.AppendScheduled(make([]byte, 0, 160), s), '\n'), nil
}

func (a *App) handleBatch(c *call) (int, any, *wire.Error) {
	in, out := c.buf(), c.buf()
	body, e := c.body(a.cfg.MaxBody, in)
	if e != nil {
		return 0, nil, e
	}
	items, e := wire.DecodeBatch(body, a.cfg.MaxBatch)
	if e != nil {
		return 0, nil, e
	}
	results := a.ScheduleTasks(c.Context(), items)
	out.Grow(16 + len(results)*110)
	b := append(out.AvailableBuffer(), `{"results":[`...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendScheduled(b, &results[i])
	}
	b = append(b, "]}\n"...)
	a.log.Debug("batch scheduled", "tasks", len(items))
	return http.StatusOK, b, nil
}

// ScheduleTask schedules one task given in the API's JSON (the body of
// POST /v1/tasks), grouped with concurrent calls (the coalescer), and
// answers as that endpoint does: Err set for a refused task (4xx naming
// the field) or a failure. The handler calls it; an embedded daemon's
// producer calls ScheduleFields.
func (a *App) ScheduleTask(ctx context.Context, body []byte) wire.Scheduled {
	return a.scheduleOne(ctx, func(now time.Time) (redisstore.Submit, *wire.Error) { return wire.DecodeTask(body, now) })
}

// ScheduleFields is ScheduleTask for a task given as Go values (package
// embedded): the API's checks and answers, without JSON.
func (a *App) ScheduleFields(ctx context.Context, f *wire.Fields) wire.Scheduled {
	return a.scheduleOne(ctx, func(now time.Time) (redisstore.Submit, *wire.Error) { return wire.NewTask(f, now) })
}

func (a *App) scheduleOne(ctx context.Context, decode func(time.Time) (redisstore.Submit, *wire.Error)) wire.Scheduled {
	sub, e := decode(a.now())
	if e == nil {
		e = a.topics().check(sub.Task.Topic) // topics.go
	}
	if e == nil {
		e = a.checkRecordSize(sub.Task)
	}
	if e != nil {
		return wire.Scheduled{Err: e}
	}
	return a.coalesce.schedule(ctx, sub)
}

// ScheduleTasks schedules the tasks of a batch (each in the API's JSON, an
// item of POST /v1/tasks/batch) in one store call; the results are in
// order, a refused task's with Err set. The caller bounds the count
// (DQ_MAX_BATCH, see CheckBatch).
func (a *App) ScheduleTasks(ctx context.Context, items [][]byte) []wire.Scheduled {
	return a.scheduleMany(ctx, len(items), func(i int, now time.Time) (redisstore.Submit, *wire.Error) {
		return wire.DecodeTask(items[i], now)
	})
}

// ScheduleFieldsBatch is ScheduleTasks for tasks given as Go values.
func (a *App) ScheduleFieldsBatch(ctx context.Context, fs []wire.Fields) []wire.Scheduled {
	return a.scheduleMany(ctx, len(fs), func(i int, now time.Time) (redisstore.Submit, *wire.Error) {
		return wire.NewTask(&fs[i], now)
	})
}

func (a *App) scheduleMany(ctx context.Context, n int, decode func(int, time.Time) (redisstore.Submit, *wire.Error)) []wire.Scheduled {
	now := a.now()
	results := make([]wire.Scheduled, n)
	subs := make([]redisstore.Submit, 0, n)
	pos := make([]int, 0, n)
	for i := range n {
		sub, e := decode(i, now)
		if e == nil {
			e = a.topics().check(sub.Task.Topic) // topics.go
		}
		if e == nil {
			e = a.checkRecordSize(sub.Task)
		}
		if e != nil {
			results[i].Err = e
			continue
		}
		subs = append(subs, sub)
		pos = append(pos, i)
	}
	if len(subs) > 0 {
		for j, s := range a.schedule(ctx, subs) {
			results[pos[j]] = s
		}
	}
	return results
}

// CheckBatch refuses a batch of n tasks over DQ_MAX_BATCH as the batch
// endpoint does (413 batch_too_large).
func (a *App) CheckBatch(n int) *wire.Error {
	if n > a.cfg.MaxBatch {
		return wire.BatchTooLarge(a.cfg.MaxBatch)
	}
	return nil
}

// checkRecordSize refuses a task whose Kafka record would be larger than
// DQ_MAX_RECORD_BYTES: the broker would refuse it at every fire, so it
// would never run.
func (a *App) checkRecordSize(t *task.Task) *wire.Error {
	n := record.Size(t)
	if int64(n) <= a.cfg.MaxRecordBytes {
		return nil
	}
	return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeRecordTooLarge,
		Message: fmt.Sprintf("task %s: its Kafka record would be %d bytes (payload %d, key, headers and framing %d), over the limit of %d bytes (DQ_MAX_RECORD_BYTES)",
			task.Truncate(t.ID, 64), n, len(t.Payload), n-len(t.Payload), a.cfg.MaxRecordBytes)}
}

// Why a task of a schedule call is journaled; 0: it is not.
const (
	whyRedisDown uint8 = iota + 1
	whyShardDown
	whyUnavailable
	whyOrder
	whyUnconfirmed // written, but the replicas did not confirm it: a written journal entry
	whyMaybeRun    // unavailable after it was sent (a timeout, a reset): it may have run, a written entry too
	whyOrderRun    // whyOrder for an item that was sent and may have run: a written entry
)

var whyReason = [...]string{whyRedisDown: reasonRedisDown, whyShardDown: reasonShardDown, whyUnavailable: reasonUnavailable,
	whyOrder: reasonOrder, whyUnconfirmed: reasonUnconfirmed, whyMaybeRun: reasonUnavailable, whyOrderRun: reasonOrder}

// schedule stores tasks in Redis, or journals them. A task is journaled
// when
//   - Redis does not answer (a single server, every master of a cluster)
//     or the store is not open yet;
//   - an earlier submission of its id, or of an id of the same lane,
//     waits in the journal (lanes.go), or an earlier item of its id in
//     subs is journaled: each id's submissions are applied in order;
//   - its shard is known down (a cluster: shardhealth.go), so that no
//     request waits for a dead master;
//   - its write fails unavailable (redisstore.IsUnavailable: refused,
//     timed out, refused writes, not replicated in time, ...); on a
//     cluster that is the failing shard's tasks only.
//
// The others go to Redis in one store call: during one master's outage
// the tasks of the other masters' shards are stored as usual. The results
// are in the order of subs.
func (a *App) schedule(ctx context.Context, subs []redisstore.Submit) []wire.Scheduled {
	a.noteTypes(subs) // for GET /v1/types (types.go)
	out := make([]wire.Scheduled, len(subs))
	why := make([]uint8, len(subs))
	st := a.store.Load()
	if st == nil || !a.redisUp.Load() {
		for i := range why {
			why[i] = whyRedisDown
		}
		a.journalWhy(ctx, subs, why, out)
		return out
	}
	m, now := st.Map(), a.now()
	var held map[string]bool // ids with an item journaled by this call
	hold := func(i int, w uint8) {
		if held == nil {
			held = make(map[string]bool)
		}
		held[subs[i].Task.ID] = true
		why[i] = w
	}
	send, pos := subs, []int(nil) // pos[j]: the index in subs of send[j] (nil: the same)
	for i := range subs {
		id := subs[i].Task.ID
		switch {
		case a.down.downFor(m, id, now):
			hold(i, whyShardDown)
		case held[id] || a.inJournal(ctx, id):
			hold(i, whyOrder)
		}
	}
	if held != nil {
		send, pos = make([]redisstore.Submit, 0, len(subs)), make([]int, 0, len(subs))
		for i := range subs {
			if why[i] == 0 {
				send, pos = append(send, subs[i]), append(pos, i)
			}
		}
	}
	if len(send) > 0 {
		octx, cancel := a.opContext(ctx)
		res, err := st.Schedule(octx, send)
		cancel()
		a.noteResults(m, res, err)
		var counts [5]int
		for j := range res {
			r, i := &res[j], j
			if pos != nil {
				i = pos[j]
			}
			switch {
			case held[r.ID]:
				// A later item of an id whose earlier item is journaled is
				// journaled too (even if Redis took it): the replay must
				// end with the latest submission.
				why[i] = whyOrder
				if mayHaveRun(r.Err) {
					why[i] = whyOrderRun // it reached Redis, or may have
				}
			case errors.Is(r.Err, redisstore.ErrNotReplicated):
				// in Redis, it fires on time; the journal confirms it
				hold(i, whyUnconfirmed)
			case r.Err != nil && redisstore.IsUnavailable(r.Err) && !redisstore.NotRun(r.Err):
				hold(i, whyMaybeRun)
			case r.Err != nil && redisstore.IsUnavailable(r.Err):
				hold(i, whyUnavailable)
			case r.Outcome == redisstore.Rejected:
				counts[redisstore.Rejected]++
				out[i] = wire.Scheduled{ID: r.ID, Err: wire.Conflict(rejectedMessage(r))}
			case r.Err != nil || r.Outcome < redisstore.Created || r.Outcome > redisstore.Updated:
				out[i] = wire.Scheduled{ID: r.ID, Err: a.internalError("schedule", r.Err, "task_id", r.ID, "outcome", r.Outcome)}
			default:
				counts[r.Outcome]++
				out[i] = wire.Scheduled{ID: r.ID, State: r.State, Outcome: r.Outcome.String(), DueAt: r.DueAt, Shard: r.Shard}
			}
		}
		for o, n := range counts {
			if n > 0 {
				a.m.scheduled.WithLabelValues(redisstore.Outcome(o).String()).Add(float64(n))
			}
		}
	}
	if held != nil {
		a.journalWhy(ctx, subs, why, out)
	}
	return out
}

// journalWhy journals the tasks of subs that have a reason in why, in the
// order of subs, and counts the reasons.
func (a *App) journalWhy(ctx context.Context, subs []redisstore.Submit, why []uint8, out []wire.Scheduled) {
	idx := make([]int, 0, len(subs))
	var counts [len(whyReason)]int
	for i, w := range why {
		if w != 0 {
			idx = append(idx, i)
			counts[w]++
		}
	}
	// the compensator has nothing to do for tasks of shards known down
	wake := !a.cluster || counts[whyRedisDown] > 0 || counts[whyOrder] > 0 || counts[whyUnconfirmed] > 0
	if !a.appendJournal(ctx, subs, idx, why, out, wake) {
		return
	}
	for w, n := range counts {
		if n > 0 {
			a.m.journaled.WithLabelValues(whyReason[w]).Add(float64(n))
		}
	}
}

func rejectedMessage(r *redisstore.Result) string {
	return fmt.Sprintf("task %s exists and is %s: a task can take other content only while it waits", r.ID, r.State)
}

// appendJournal is journal; it reports whether the append succeeded, and
// wakes the compensator only if wake. The lanes of the ids count the
// entries from before the append (lanes.go).
func (a *App) appendJournal(ctx context.Context, subs []redisstore.Submit, idx []int, why []uint8, out []wire.Scheduled, wake bool) bool {
	if len(idx) == 0 {
		return true
	}
	entries := make([]journal.Entry, len(idx))
	now := a.now()
	for j, i := range idx {
		t := subs[i].Task
		written := why[i] == whyUnconfirmed || why[i] == whyMaybeRun || why[i] == whyOrderRun
		entries[j] = journal.Entry{ID: t.ID, Data: encodeJournalData(t, written), At: now}
		a.lanes.add(t.ID)
	}
	_, err := a.jr.Append(context.WithoutCancel(ctx), entries...)
	for _, i := range idx {
		t := subs[i].Task
		if err != nil {
			a.lanes.done(t.ID)
			out[i] = wire.Scheduled{ID: t.ID, Err: wire.Unavailable("redis cannot take the task now and the journal write failed")}
			continue
		}
		out[i] = wire.Scheduled{ID: t.ID, State: task.StateJournaled, Outcome: wire.OutcomeJournaled, DueAt: t.DueAt,
			Shard: a.shardOf(t.ID)}
	}
	if err != nil {
		a.log.Error("journal append failed", "tasks", len(idx), "error", err)
		return false
	}
	a.m.scheduled.WithLabelValues(wire.OutcomeJournaled).Add(float64(len(idx)))
	if wake {
		a.wake()
	}
	return true
}

// --- single task ---

// pathID reads and checks the {id} path value. It names a task that may
// have been stored before task.ValidateID refused its id ("." and ".."
// arrive here escaped as %2E), so it passes task.ValidateStoredID.
func pathID(c *call) (string, *wire.Error) {
	id := c.PathValue("id")
	if err := task.ValidateStoredID(id); err != nil {
		return "", wire.InvalidTask(wire.ValidationMessage(err))
	}
	return id, nil
}

// storeFor returns the store, or the 503 answer while it is not open or
// Redis is known to be down (the store keeper pings it every second).
func (a *App) storeFor() (*redisstore.Store, *wire.Error) {
	st := a.store.Load()
	switch {
	case st == nil:
		return nil, wire.Unavailable("redis has not been reachable since the daemon started")
	case !a.redisUp.Load():
		return nil, wire.Unavailable("redis is unreachable")
	}
	return st, nil
}

// storeForID is storeFor for an operation on id: 503 also while the id's
// shard is known down (a cluster), without waiting for its master.
func (a *App) storeForID(id string) (*redisstore.Store, *wire.Error) {
	st, e := a.storeFor()
	if e == nil && a.down.downFor(st.Map(), id, a.now()) {
		return nil, wire.Unavailable("redis is unreachable for the shard of task " + id)
	}
	return st, e
}

// inJournal reports whether an entry of id waits in the journal: its
// lane's count, then (only when the lane is busy) the journal's id index,
// so that an id that merely shares a lane with a journaled one is not
// journaled behind it. A failed lookup answers true: journaling keeps the
// order either way.
func (a *App) inJournal(ctx context.Context, id string) bool {
	if !a.lanes.busy(id) {
		return false
	}
	_, ok, err := a.jr.Lookup(ctx, id)
	return ok || err != nil
}

// journaled returns the journal's latest entry for id, if any.
func (a *App) journaled(ctx context.Context, id string) (*task.Task, bool, *wire.Error) {
	if !a.lanes.busy(id) { // no entry of its lane: no I/O
		return nil, false, nil
	}
	e, ok, err := a.jr.Lookup(ctx, id)
	if err != nil {
		a.log.Error("journal lookup failed", "task_id", id, "error", err)
		return nil, false, wire.Internal("journal lookup failed")
	}
	if !ok {
		return nil, false, nil
	}
	t, err := decodeJournalData(e.ID, e.Data)
	if err != nil {
		a.log.Error("unreadable journal entry", "task_id", id, "seq", e.Seq, "error", err)
		return nil, false, wire.Internal("unreadable journal entry")
	}
	t.State, t.Attempt, t.Shard = task.StateJournaled, 1, a.shardOf(id)
	return t, true, nil
}

// storeError maps a store error of an operation on id to the answer.
func (a *App) storeError(id string, err error) *wire.Error {
	var se *redisstore.StateError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return wire.NotFound("task " + id + " not found")
	case errors.As(err, &se):
		return wire.Conflict(fmt.Sprintf("task %s is %s", id, se.State))
	case errors.Is(err, redisstore.ErrNotReplicated):
		// a failover may still undo the change: never a 2xx (issue 39)
		return wire.OutcomeUnknown("task " + id + ": the change ran on the Redis primary but its replicas did not confirm it in time (DQ_REDIS_REPLICA_ACKS); send it again")
	case redisstore.IsUnavailable(err):
		return wire.Unavailable("redis is " + redisCondition(err))
	}
	return a.internalError("store", err, "task_id", id)
}

func (a *App) handleGet(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	t, ok, e := a.journaled(c.Context(), id)
	if e != nil {
		return 0, nil, e
	}
	if !ok {
		st, e := a.storeForID(id)
		if e != nil {
			return 0, nil, e
		}
		err := a.inStore(c.Context(), func(ctx context.Context) (err error) {
			t, err = st.Get(ctx, id)
			return err
		})
		if err != nil {
			return 0, nil, a.storeError(id, err)
		}
	}
	b, err := wire.AppendTask(make([]byte, 0, 256+len(t.Payload)), t, time.Time{})
	if err != nil {
		return 0, nil, a.internalError("encode task", err, "task_id", id)
	}
	return http.StatusOK, append(b, '\n'), nil
}

// noteStore records a store error that is not an answer about a task.
// On a cluster an operation that reached no master says nothing of the
// others: the store keeper's ping decides whether Redis is down.
func (a *App) noteStore(err error) {
	var se *redisstore.StateError
	if errors.Is(err, redisstore.ErrNotFound) || errors.As(err, &se) {
		err = nil // Redis answered
	}
	if a.cluster && redisstore.IsUnavailable(err) && !redisAnswered(err) {
		a.noteMisconfig(err)
		a.m.redisErrs.Inc()
		return
	}
	a.noteRedis(err)
}

// writable checks that id can be changed in Redis now: the store is open,
// the id's shard is not known down and the journal holds no newer version
// of it.
func (a *App) writable(ctx context.Context, id string) (*redisstore.Store, *wire.Error) {
	st, e := a.storeForID(id)
	if e != nil {
		return nil, e
	}
	_, ok, e := a.journaled(ctx, id)
	if e != nil {
		return nil, e
	}
	if ok {
		return nil, wire.Unavailable("task " + id + " is journaled (redis was unreachable); retry once it is replayed")
	}
	return st, nil
}

func (a *App) handleReschedule(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	var buf bytes.Buffer
	body, e := c.body(a.cfg.MaxBody, &buf)
	if e != nil {
		return 0, nil, e
	}
	d, e := wire.DecodeReschedule(body, a.now())
	if e != nil {
		return 0, nil, e
	}
	st, e := a.writable(c.Context(), id)
	if e != nil {
		return 0, nil, e
	}
	var at time.Time
	err := a.inStore(c.Context(), func(ctx context.Context) (err error) {
		at, err = st.Reschedule(ctx, id, d.At, d.Delay, d.Relative)
		return err
	})
	if err != nil {
		return 0, nil, a.storeError(id, err)
	}
	a.log.Debug("task rescheduled", "task_id", id, "due_at", at)
	return http.StatusOK, map[string]string{"id": id, "due_at": wire.FormatTime(at)}, nil
}

func (a *App) handleCancel(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.writable(c.Context(), id)
	if e != nil {
		return 0, nil, e
	}
	err := a.inStore(c.Context(), func(ctx context.Context) error { return st.Cancel(ctx, id) })
	if err != nil {
		return 0, nil, a.storeError(id, err)
	}
	a.log.Debug("task cancelled", "task_id", id)
	a.publishCancelled(c.Context(), st, id) // outcomes.go
	return http.StatusOK, map[string]string{"id": id, "state": string(task.StateCancelled)}, nil
}

// --- stats ---

type statsTotals struct {
	Scheduled int64 `json:"scheduled"`
	Firing    int64 `json:"firing"`
	Dead      int64 `json:"dead"`
}

type statsResponse struct {
	Namespace    string                  `json:"namespace"`
	ShardCount   int                     `json:"shard_count"`
	RedisUp      bool                    `json:"redis_up"`
	RedisError   string                  `json:"redis_error,omitempty"`
	ShardsDown   []int                   `json:"shards_down"` // shards whose master is known down (a cluster)
	JournalDepth int                     `json:"journal_depth"`
	Totals       statsTotals             `json:"totals"`
	Shards       []redisstore.ShardStats `json:"shards"`
}

func (a *App) handleStats(c *call) (int, any, *wire.Error) {
	resp := statsResponse{Namespace: a.cfg.Namespace, ShardCount: a.shardCount(), Shards: []redisstore.ShardStats{},
		ShardsDown: a.shardsDown()}
	if resp.ShardsDown == nil {
		resp.ShardsDown = []int{}
	}
	if st, e := a.storeFor(); e != nil {
		resp.RedisError = e.Message
	} else {
		var shards []redisstore.ShardStats
		err := a.inStore(c.Context(), func(ctx context.Context) (err error) {
			shards, err = st.Stats(ctx)
			return err
		})
		switch {
		case err != nil && a.cluster && a.redisUp.Load():
			// one master down fails the read of every shard's figures
			// (one read); Redis answers the other shards
			resp.RedisUp = true
			resp.RedisError = "shard figures not read: redis " + redisCondition(err)
		case err != nil:
			resp.RedisError = "redis " + redisCondition(err)
		default:
			resp.RedisUp = true
			resp.Shards = shards
			for _, s := range shards {
				resp.Totals.Scheduled += s.Scheduled
				resp.Totals.Firing += s.Firing
				resp.Totals.Dead += s.Dead
			}
		}
	}
	resp.JournalDepth = a.jr.Len()
	return http.StatusOK, resp, nil
}

// --- dead tasks ---

const (
	defaultDeadLimit = 100
	maxDeadLimit     = 1000
)

func (a *App) handleListDead(c *call) (int, any, *wire.Error) {
	limit, e := deadListQuery(c) // operator.go
	if e != nil {
		return 0, nil, e
	}
	st, e := a.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var dead []redisstore.DeadTask
	err := a.inStore(c.Context(), func(ctx context.Context) (err error) {
		dead, err = st.ListDead(ctx, limit)
		return err
	})
	if err != nil {
		return 0, nil, a.storeError("", err)
	}
	b := append(make([]byte, 0, 64+len(dead)*256), `{"dead":[`...)
	for i, d := range dead {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = wire.AppendTask(b, d.Task, d.DiedAt); err != nil {
			return 0, nil, a.internalError("encode task", err, "task_id", d.Task.ID)
		}
	}
	return http.StatusOK, append(b, "]}\n"...), nil
}

func (a *App) handleRedrive(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.storeFor()
	if e != nil {
		return 0, nil, e
	}
	var at time.Time
	err := a.inStore(c.Context(), func(ctx context.Context) (err error) {
		at, err = st.Redrive(ctx, id)
		return err
	})
	if err != nil {
		return 0, nil, a.deadError(id, err)
	}
	a.log.Debug("dead task redriven", "task_id", id)
	return http.StatusOK, map[string]string{"id": id, "state": string(task.StateScheduled), "due_at": wire.FormatTime(at)}, nil
}

func (a *App) handleDeleteDead(c *call) (int, any, *wire.Error) {
	id, e := pathID(c)
	if e != nil {
		return 0, nil, e
	}
	st, e := a.storeFor()
	if e != nil {
		return 0, nil, e
	}
	err := a.inStore(c.Context(), func(ctx context.Context) error { return st.DeleteDead(ctx, id) })
	if err != nil {
		return 0, nil, a.deadError(id, err)
	}
	a.log.Debug("dead task deleted", "task_id", id)
	return http.StatusOK, map[string]any{"id": id, "deleted": true}, nil
}

// deadError is storeError with messages for the dead-set operations.
func (a *App) deadError(id string, err error) *wire.Error {
	var se *redisstore.StateError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return wire.NotFound("dead task " + id + " not found")
	case errors.As(err, &se):
		return wire.Conflict(fmt.Sprintf("task %s is %s, not dead", id, se.State))
	}
	return a.storeError(id, err)
}
