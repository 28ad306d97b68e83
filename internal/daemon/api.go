package daemon

import (
	"bytes"
	"crypto/subtle"
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
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/task"
)

// The HTTP API. Every /v1 answer is JSON; errors are
// {"error":{"code","message"}} (codes in wire/error.go). Bad input is a
// 4xx and changes nothing. Each endpoint is a function from the request
// to its answer (see handle); the wire package decodes and encodes.
//
// Redis unavailable: schedules are journaled (202); on a Redis Cluster
// only those of the shards whose master is unavailable (see core.schedule).
// Reads and PATCH/DELETE/redrive answer 503 unavailable with Retry-After:
// they cannot be journaled without breaking what they answer (by id: when
// the id's shard is known down). A PATCH or DELETE of an id that still has
// an entry in the journal also answers 503 until the entry is replayed, so
// it cannot act on an older version in Redis. GET /v1/stats always answers
// 200, with redis_up (a cluster: some master answers), shards_down and
// journal_depth, so operators can watch a journal drain during an outage.

func (a *App) routes() http.Handler {
	mux := http.NewServeMux()
	admin.MountReport(mux, a.reg, a.core.report)
	mux.Handle("POST /v1/tasks", handle(traced(a.handleSchedule)))
	mux.Handle("POST /v1/tasks/batch", handle(traced(a.handleBatch)))
	mux.Handle("GET /v1/tasks", handle(a.handleListTasks))
	mux.Handle("POST /v1/tasks/cancel", handle(traced(a.handleCancelMany)))
	mux.Handle("GET /v1/tasks/{id}", handle(a.handleGet))
	mux.Handle("PATCH /v1/tasks/{id}", handle(traced(a.handleReschedule)))
	mux.Handle("DELETE /v1/tasks/{id}", handle(traced(a.handleCancel)))
	mux.Handle("GET /v1/stats", handle(a.handleStats))
	mux.Handle("GET /v1/counts", handle(a.handleCounts))   // census.go
	mux.Handle("GET /v1/load", handle(a.handleLoad))       // census.go
	mux.Handle("GET /v1/history", handle(a.handleHistory)) // census.go
	mux.Handle("GET /v1/search", handle(a.handleSearch))   // search.go
	mux.Handle("GET /v1/inflight", handle(a.handleInFlight))
	mux.Handle("GET /v1/dead", handle(a.handleListDead))
	mux.Handle("DELETE /v1/dead", handle(a.handleDeleteDeadMany))
	mux.Handle("POST /v1/dead/redrive", handle(traced(a.handleRedriveMany)))
	mux.Handle("POST /v1/dead/{id}/redrive", handle(traced(a.handleRedrive)))
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
	a.limits.mount(mux)                       // /v1/limits (limits.go)
	mux.Handle("GET /ui/", console.Handler()) // the operator console: static assets, no token (its /v1 calls carry it)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteError(w, wire.NotFound(fmt.Sprintf("no endpoint %s %s", r.Method, task.Truncate(r.URL.Path, 100))))
	})
	return &server{app: a, mux: mux, origins: a.crossOrigin()}
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
	a.hm.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
	a.hm.duration.WithLabelValues(route).Observe(d.Seconds())
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
