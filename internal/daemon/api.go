package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/journal"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
)

// The HTTP API. Every /v1 answer is JSON; errors are
// {"error":{"code","message"}} (codes in apierror.go). Bad input is a 4xx
// and changes nothing.
//
// Redis unavailable: schedules are journaled (202). Reads and
// PATCH/DELETE/redrive answer 503 unavailable with Retry-After: they
// cannot be journaled without breaking what they answer. A PATCH or DELETE
// of an id that still has an entry in the journal also answers 503 until
// the entry is replayed, so it cannot act on an older version in Redis.
// GET /v1/stats always answers 200, with redis_up and journal_depth, so
// operators can watch a journal drain during an outage.

func (a *App) routes() http.Handler {
	mux := http.NewServeMux()
	admin.Mount(mux, a.reg, a.ready)
	mux.HandleFunc("POST /v1/tasks", a.handleSchedule)
	mux.HandleFunc("POST /v1/tasks/batch", a.handleBatch)
	mux.HandleFunc("GET /v1/tasks/{id}", a.handleGet)
	mux.HandleFunc("PATCH /v1/tasks/{id}", a.handleReschedule)
	mux.HandleFunc("DELETE /v1/tasks/{id}", a.handleCancel)
	mux.HandleFunc("GET /v1/stats", a.handleStats)
	mux.HandleFunc("GET /v1/dead", a.handleListDead)
	mux.HandleFunc("POST /v1/dead/{id}/redrive", a.handleRedrive)
	mux.HandleFunc("DELETE /v1/dead/{id}", a.handleDeleteDead)
	mux.Handle("/v1/limits", a.limits)
	mux.Handle("/v1/limits/", a.limits)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFound(fmt.Sprintf("no endpoint %s %s", r.Method, truncateString(r.URL.Path, 100))))
	})
	return &server{app: a, mux: mux}
}

// server wraps the mux with authentication, panic recovery, metrics and
// the per-request debug log.
type server struct {
	app *App
	mux *http.ServeMux
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := s.app
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p)
				if sw.code == 0 {
					writeError(sw, errInternal("internal error"))
				}
			}
		}()
		if strings.HasPrefix(r.URL.Path, "/v1/") && !s.authorized(r) {
			_, r.Pattern = s.mux.Handler(r)
			writeError(sw, &apiError{http.StatusUnauthorized, codeUnauthorized, "missing or wrong bearer token"})
			return
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

// authorized checks the bearer token in constant time (when one is set).
func (s *server) authorized(r *http.Request) bool {
	want := s.app.cfg.APIToken
	if want == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
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

// --- schedule ---

func (a *App) handleSchedule(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	body, e := readJSONBody(w, r, a.cfg.MaxBody, &buf)
	if e != nil {
		writeError(w, e)
		return
	}
	sub, e := decodeTask(body, a.now())
	if e != nil {
		writeError(w, e)
		return
	}
	res := a.coalesce.schedule(r.Context(), sub)
	s := &res
	if s.err != nil {
		writeError(w, s.err)
		return
	}
	a.log.Debug("task scheduled", "task_id", s.id, "outcome", s.outcome, "due_at", s.dueAt)
	writeRaw(w, s.status(), append(appendScheduled(make([]byte, 0, 160), s), '\n'))
}

func (a *App) handleBatch(w http.ResponseWriter, r *http.Request) {
	in, out := getBuf(), getBuf()
	defer putBuf(in)
	defer putBuf(out)
	body, e := readJSONBody(w, r, a.cfg.MaxBody, in)
	if e != nil {
		writeError(w, e)
		return
	}
	items, e := decodeBatch(body, a.cfg.MaxBatch)
	if e != nil {
		writeError(w, e)
		return
	}
	now := a.now()
	results := make([]scheduled, len(items))
	subs := make([]redisstore.Submit, 0, len(items))
	pos := make([]int, 0, len(items))
	for i, raw := range items {
		sub, e := decodeTask(raw, now)
		if e != nil {
			results[i].err = e
			continue
		}
		subs = append(subs, sub)
		pos = append(pos, i)
	}
	if len(subs) > 0 {
		for j, s := range a.schedule(r.Context(), subs) {
			results[pos[j]] = s
		}
	}
	out.Grow(16 + len(results)*110)
	b := append(out.AvailableBuffer(), `{"results":[`...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendScheduled(b, &results[i])
	}
	b = append(b, "]}\n"...)
	a.log.Debug("batch scheduled", "tasks", len(items), "accepted", len(subs))
	writeRaw(w, http.StatusOK, b)
}

// schedule stores tasks in Redis, or journals them when Redis is
// unavailable (or the journal is not empty, to keep per-id order). The
// results are in the order of subs.
func (a *App) schedule(ctx context.Context, subs []redisstore.Submit) []scheduled {
	out := make([]scheduled, len(subs))
	var toJournal []int
	st := a.store.Load()
	// Straight to the journal when Redis is known to be down (no timeout
	// per request during an outage) or entries wait for replay (order).
	if st == nil || !a.redisUp.Load() || a.jr.Len() > 0 {
		toJournal = make([]int, len(subs))
		for i := range subs {
			toJournal[i] = i
		}
	} else {
		octx, cancel := a.opContext(ctx)
		res, err := st.Schedule(octx, subs)
		cancel()
		a.noteRedis(err)
		var journaledIDs map[string]bool // ids with an earlier item of this call journaled
		var counts [5]int
		for i := range res {
			r := &res[i]
			switch {
			case journaledIDs[r.ID] || (r.Err != nil && redisstore.IsUnavailable(r.Err)):
				// A later item of an id whose earlier item is journaled is
				// journaled too (even if Redis took it): the replay must
				// end with the latest submission.
				if journaledIDs == nil {
					journaledIDs = make(map[string]bool)
				}
				journaledIDs[r.ID] = true
				toJournal = append(toJournal, i)
			case r.Outcome == redisstore.Rejected:
				counts[redisstore.Rejected]++
				out[i] = scheduled{id: r.ID, err: errConflict(rejectedMessage(r))}
			case r.Err != nil || r.Outcome < redisstore.Created || r.Outcome > redisstore.Updated:
				a.log.Error("schedule failed", "task_id", r.ID, "outcome", r.Outcome, "error", r.Err)
				out[i] = scheduled{id: r.ID, err: errInternal(fmt.Sprintf("store: outcome %s: %v", r.Outcome, r.Err))}
			default:
				counts[r.Outcome]++
				out[i] = scheduled{id: r.ID, state: r.State, outcome: r.Outcome.String(), dueAt: r.DueAt, shard: r.Shard}
			}
		}
		for o, n := range counts {
			if n > 0 {
				a.m.scheduled.WithLabelValues(redisstore.Outcome(o).String()).Add(float64(n))
			}
		}
	}
	if len(toJournal) > 0 {
		a.journal(ctx, subs, toJournal, out)
	}
	return out
}

func rejectedMessage(r *redisstore.Result) string {
	return fmt.Sprintf("task %s exists and is %s: a task can take other content only while it waits", r.ID, r.State)
}

// journal appends subs[idx...] to the journal in one fsync'd append.
func (a *App) journal(ctx context.Context, subs []redisstore.Submit, idx []int, out []scheduled) {
	entries := make([]journal.Entry, len(idx))
	now := a.now()
	for j, i := range idx {
		t := subs[i].Task
		entries[j] = journal.Entry{ID: t.ID, Data: encodeJournalData(t), At: now}
	}
	_, err := a.jr.Append(context.WithoutCancel(ctx), entries...)
	for _, i := range idx {
		t := subs[i].Task
		if err != nil {
			out[i] = scheduled{id: t.ID, err: errUnavailable("redis is unreachable and the journal write failed")}
			continue
		}
		out[i] = scheduled{id: t.ID, state: task.StateJournaled, outcome: outcomeJournaled, dueAt: t.DueAt,
			shard: redisstore.ShardOf(t.ID, a.cfg.Shards)}
	}
	if err != nil {
		a.log.Error("journal append failed", "tasks", len(idx), "error", err)
		return
	}
	a.m.scheduled.WithLabelValues(outcomeJournaled).Add(float64(len(idx)))
	a.wake()
}

// --- single task ---

// pathID reads and checks the {id} path value.
func pathID(r *http.Request) (string, *apiError) {
	id := r.PathValue("id")
	if err := task.ValidateID(id); err != nil {
		return "", errInvalidTask(validationMessage(err))
	}
	return id, nil
}

// storeFor returns the store, or the 503 answer while it is not open or
// Redis is known to be down (the store keeper pings it every second).
func (a *App) storeFor() (*redisstore.Store, *apiError) {
	st := a.store.Load()
	switch {
	case st == nil:
		return nil, errUnavailable("redis has not been reachable since the daemon started")
	case !a.redisUp.Load():
		return nil, errUnavailable("redis is unreachable")
	}
	return st, nil
}

// journaled returns the journal's latest entry for id, if any.
func (a *App) journaled(ctx context.Context, id string) (*task.Task, bool, *apiError) {
	if a.jr.Len() == 0 {
		return nil, false, nil
	}
	e, ok, err := a.jr.Lookup(ctx, id)
	if err != nil {
		a.log.Error("journal lookup failed", "task_id", id, "error", err)
		return nil, false, errInternal("journal lookup failed")
	}
	if !ok {
		return nil, false, nil
	}
	t, err := decodeJournalData(e.ID, e.Data)
	if err != nil {
		a.log.Error("unreadable journal entry", "task_id", id, "seq", e.Seq, "error", err)
		return nil, false, errInternal("unreadable journal entry")
	}
	t.State, t.Attempt, t.Shard = task.StateJournaled, 1, redisstore.ShardOf(id, a.cfg.Shards)
	return t, true, nil
}

// storeError maps a store error of an operation on id to the answer.
func (a *App) storeError(id string, err error) *apiError {
	var se *redisstore.StateError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return errNotFound("task " + id + " not found")
	case errors.As(err, &se):
		return errConflict(fmt.Sprintf("task %s is %s", id, se.State))
	case redisstore.IsUnavailable(err):
		return errUnavailable("redis is unreachable")
	}
	a.log.Error("store operation failed", "task_id", id, "error", err)
	return errInternal("store: " + err.Error())
}

func (a *App) handleGet(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	t, ok, e := a.journaled(r.Context(), id)
	if e != nil {
		writeError(w, e)
		return
	}
	if !ok {
		st, e := a.storeFor()
		if e != nil {
			writeError(w, e)
			return
		}
		octx, cancel := a.opContext(r.Context())
		var err error
		t, err = st.Get(octx, id)
		cancel()
		a.noteStore(err)
		if err != nil {
			writeError(w, a.storeError(id, err))
			return
		}
	}
	b, err := appendTask(make([]byte, 0, 256+len(t.Payload)), t, time.Time{})
	if err != nil {
		writeError(w, errInternal("encode task: "+err.Error()))
		return
	}
	writeRaw(w, http.StatusOK, append(b, '\n'))
}

// noteStore records a store error that is not an answer about a task.
func (a *App) noteStore(err error) {
	var se *redisstore.StateError
	if errors.Is(err, redisstore.ErrNotFound) || errors.As(err, &se) {
		err = nil // Redis answered
	}
	a.noteRedis(err)
}

// writable checks that id can be changed in Redis now: the store is open
// and the journal holds no newer version of it.
func (a *App) writable(ctx context.Context, id string) (*redisstore.Store, *apiError) {
	st, e := a.storeFor()
	if e != nil {
		return nil, e
	}
	_, ok, e := a.journaled(ctx, id)
	if e != nil {
		return nil, e
	}
	if ok {
		return nil, errUnavailable("task " + id + " is journaled (redis was unreachable); retry once it is replayed")
	}
	return st, nil
}

func (a *App) handleReschedule(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var buf bytes.Buffer
	body, e := readJSONBody(w, r, a.cfg.MaxBody, &buf)
	if e != nil {
		writeError(w, e)
		return
	}
	d, e := decodeReschedule(body, a.now())
	if e != nil {
		writeError(w, e)
		return
	}
	st, e := a.writable(r.Context(), id)
	if e != nil {
		writeError(w, e)
		return
	}
	octx, cancel := a.opContext(r.Context())
	at, err := st.Reschedule(octx, id, d.At, d.Delay, d.Relative)
	cancel()
	a.noteStore(err)
	if err != nil {
		writeError(w, a.storeError(id, err))
		return
	}
	a.log.Debug("task rescheduled", "task_id", id, "due_at", at)
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "due_at": formatTime(at)})
}

func (a *App) handleCancel(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	st, e := a.writable(r.Context(), id)
	if e != nil {
		writeError(w, e)
		return
	}
	octx, cancel := a.opContext(r.Context())
	err := st.Cancel(octx, id)
	cancel()
	a.noteStore(err)
	if err != nil {
		writeError(w, a.storeError(id, err))
		return
	}
	a.log.Debug("task cancelled", "task_id", id)
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "state": string(task.StateCancelled)})
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
	JournalDepth int                     `json:"journal_depth"`
	Totals       statsTotals             `json:"totals"`
	Shards       []redisstore.ShardStats `json:"shards"`
}

func (a *App) handleStats(w http.ResponseWriter, r *http.Request) {
	resp := statsResponse{Namespace: a.cfg.Namespace, ShardCount: a.cfg.Shards, Shards: []redisstore.ShardStats{}}
	if st, e := a.storeFor(); e != nil {
		resp.RedisError = e.Message
	} else {
		octx, cancel := a.opContext(r.Context())
		shards, err := st.Stats(octx)
		cancel()
		a.noteRedis(err)
		if err != nil {
			resp.RedisError = err.Error()
		} else {
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
	writeJSON(w, http.StatusOK, resp)
}

// --- dead tasks ---

const (
	defaultDeadLimit = 100
	maxDeadLimit     = 1000
)

func (a *App) handleListDead(w http.ResponseWriter, r *http.Request) {
	limit := defaultDeadLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxDeadLimit {
			writeError(w, errInvalidTask(fmt.Sprintf("limit: %q is not an integer between 1 and %d", truncateString(s, 32), maxDeadLimit)))
			return
		}
		limit = n
	}
	st, e := a.storeFor()
	if e != nil {
		writeError(w, e)
		return
	}
	octx, cancel := a.opContext(r.Context())
	dead, err := st.ListDead(octx, limit)
	cancel()
	a.noteRedis(err)
	if err != nil {
		writeError(w, a.storeError("", err))
		return
	}
	b := append(make([]byte, 0, 64+len(dead)*256), `{"dead":[`...)
	for i, d := range dead {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendTask(b, d.Task, d.DiedAt); err != nil {
			writeError(w, errInternal("encode task: "+err.Error()))
			return
		}
	}
	writeRaw(w, http.StatusOK, append(b, "]}\n"...))
}

func (a *App) handleRedrive(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	st, e := a.storeFor()
	if e != nil {
		writeError(w, e)
		return
	}
	octx, cancel := a.opContext(r.Context())
	at, err := st.Redrive(octx, id)
	cancel()
	a.noteStore(err)
	if err != nil {
		writeError(w, a.deadError(id, err))
		return
	}
	a.log.Debug("dead task redriven", "task_id", id)
	writeJSON(w, http.StatusOK, map[string]string{"id": id, "state": string(task.StateScheduled), "due_at": formatTime(at)})
}

func (a *App) handleDeleteDead(w http.ResponseWriter, r *http.Request) {
	id, e := pathID(r)
	if e != nil {
		writeError(w, e)
		return
	}
	st, e := a.storeFor()
	if e != nil {
		writeError(w, e)
		return
	}
	octx, cancel := a.opContext(r.Context())
	err := st.DeleteDead(octx, id)
	cancel()
	a.noteStore(err)
	if err != nil {
		writeError(w, a.deadError(id, err))
		return
	}
	a.log.Debug("dead task deleted", "task_id", id)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "deleted": true})
}

// deadError is storeError with messages for the dead-set operations.
func (a *App) deadError(id string, err error) *apiError {
	var se *redisstore.StateError
	switch {
	case errors.Is(err, redisstore.ErrNotFound):
		return errNotFound("dead task " + id + " not found")
	case errors.As(err, &se):
		return errConflict(fmt.Sprintf("task %s is %s, not dead", id, se.State))
	}
	return a.storeError(id, err)
}
