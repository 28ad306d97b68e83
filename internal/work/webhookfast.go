package work

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/delayq/delayq/worker"
)

// The webhook's fast client. net/http's client costs a work process
// ~21 µs of CPU per request on the 2-core VM (its connection's read and
// write loops are goroutines of their own: three goroutines hand every
// request and answer over), fasthttp's ~10 µs on the handler's own
// goroutine (BenchmarkWebhookClients; the webhook is ~45% of a work
// process' CPU per task in bench-scale). It is used where it behaves as
// net/http does for a webhook: HTTP/1.1, no redirects followed,
// credentials in the URL sent as basic authentication, deadlines from the
// task's context and its cancellation ending the call, answers read to
// the same bounds; for plain http URLs that no proxy from the environment
// (HTTP_PROXY, NO_PROXY) applies to (UseFast).

// FastClient is the fast client the app's webhooks share. Each host has
// up to 4×maxConns connection slots (a request waits up to a minute for
// one): a slot is a fasthttp.HostClient of one connection, used by one
// call at a time, so that a call whose context ends can be cut short
// without a goroutine per call — fasthttp cannot cancel a call, and the
// slot knows the connection its call is on: the context's end sets that
// connection's deadline to the past, the call returns at once with the
// context's error, and the connection is closed (as net/http's client
// does on a cancel). Before, every call ran on a goroutine of its own so
// that the handler could return when its context ended, while the call
// went on to its deadline; the CPU per call is about the same either way
// (BenchmarkWebhookClients, bench-scale). tlsConf serves https (nil: the system's
// roots); paths are sent as written, header names in canonical form (as
// net/http sends them), both IP families dialled (net.Dialer), answers
// streamed so that their size does not matter. The slots' cleaners
// (fasthttp's goroutines that close idle connections) end some time after
// CloseIdleConnections.
type FastClient struct {
	perHost int
	tlsConf *tls.Config
	urls    sync.Map // webhook URL -> *fastHost
	mu      sync.Mutex
	hosts   map[string]*fastHost // by address (host:port, scheme)
}

// NewFastClient is the webhooks' FastClient for maxConns concurrent calls.
func NewFastClient(maxConns int, tlsConf *tls.Config) *FastClient {
	return &FastClient{perHost: 4 * max(maxConns, 1), tlsConf: tlsConf}
}

// fastHost is the slots of one host: idle holds those free.
type fastHost struct {
	addr string
	tls  bool
	idle chan *fastSlot
	mu   sync.Mutex
	all  []*fastSlot
}

// fastSlot is one connection slot: its HostClient (one connection at
// most) and, for the call using it, its context (dials honour it) and
// whether that context ended (its connection is cut).
type fastSlot struct {
	hc *fasthttp.HostClient

	mu      sync.Mutex
	ctx     context.Context
	call    uint64 // the call using the slot: an abort of an earlier one does nothing
	conn    net.Conn
	aborted bool
}

// longAgo is the deadline that cuts a connection short.
var longAgo = time.Unix(1, 0)

// host is the slots of rawURL's host.
func (c *FastClient) host(rawURL string) (*fastHost, error) {
	if h, ok := c.urls.Load(rawURL); ok {
		return h.(*fastHost), nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	secure := u.Scheme == "https"
	addr := fasthttp.AddMissingPort(u.Host, secure)
	key := u.Scheme + "://" + addr
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hosts[key]
	if h == nil {
		h = &fastHost{addr: addr, tls: secure, idle: make(chan *fastSlot, c.perHost)}
		if c.hosts == nil {
			c.hosts = map[string]*fastHost{}
		}
		c.hosts[key] = h
	}
	c.urls.Store(rawURL, h)
	return h, nil
}

// newSlot is a slot of a connection to h.
func (c *FastClient) newSlot(h *fastHost) *fastSlot {
	s := &fastSlot{}
	s.hc = &fasthttp.HostClient{
		Addr:                h.addr,
		Name:                "delayq-work",
		MaxConns:            1,
		MaxConnWaitTimeout:  time.Minute,
		MaxIdleConnDuration: 90 * time.Second, // net/http's IdleConnTimeout
		ReadBufferSize:      32 << 10,         // the answer's headers must fit
		IsTLS:               h.tls,
		TLSConfig:           c.tlsConf,
		// net's dialer (both IP families): fasthttp's own keeps a
		// process-wide goroutine and address cache
		Dial:                     s.dial,
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		StreamResponseBody:       true,
	}
	return s
}

// acquire takes a free slot of rawURL's host for a call within ctx,
// waiting up to a minute for one when all are busy; call is the call's
// number in the slot (its abort's argument).
func (c *FastClient) acquire(ctx context.Context, rawURL string) (h *fastHost, s *fastSlot, call uint64, err error) {
	h, err = c.host(rawURL)
	if err != nil {
		return nil, nil, 0, err
	}
	select {
	case s = <-h.idle:
	default:
		h.mu.Lock()
		if len(h.all) < c.perHost {
			s = c.newSlot(h)
			h.all = append(h.all, s)
		}
		h.mu.Unlock()
		if s == nil {
			t := time.NewTimer(time.Minute)
			defer t.Stop()
			select {
			case s = <-h.idle:
			case <-ctx.Done():
				return nil, nil, 0, ctx.Err()
			case <-t.C:
				return nil, nil, 0, fasthttp.ErrNoFreeConns
			}
		}
	}
	s.mu.Lock()
	s.ctx = ctx
	s.call++
	call = s.call
	s.mu.Unlock()
	return h, s, call, nil
}

// release gives s back to h once its call ended (its answer read and
// released). A call that was cut short leaves no connection behind.
func (h *fastHost) release(s *fastSlot) {
	s.mu.Lock()
	cut := s.aborted
	s.ctx, s.aborted = nil, false
	s.call++ // a late abort of the call that ended does nothing
	s.mu.Unlock()
	if cut {
		s.hc.CloseIdleConnections()
	}
	h.idle <- s // never blocks: a host has at most cap(idle) slots
}

// abort cuts call's connection short, if the slot is still its.
func (s *fastSlot) abort(call uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.call != call {
		return
	}
	s.aborted = true
	if s.conn != nil {
		_ = s.conn.SetDeadline(longAgo)
	}
}

// dial connects the slot (fasthttp dials on the calling goroutine, within
// a call), within its call's context.
func (s *fastSlot) dial(addr string) (net.Conn, error) {
	s.mu.Lock()
	ctx := s.ctx
	s.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	conn, err := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conn = conn
	if s.aborted {
		_ = conn.SetDeadline(longAgo)
	}
	s.mu.Unlock()
	return conn, nil
}

// CloseIdleConnections closes every slot's idle connection.
func (c *FastClient) CloseIdleConnections() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.hosts {
		h.mu.Lock()
		for _, s := range h.all {
			s.hc.CloseIdleConnections()
		}
		h.mu.Unlock()
	}
}

// UseFast reports whether a webhook to rawURL can use the fast client:
// a plain http URL that no proxy from the environment applies to. An
// https webhook stays on net/http: with TLS 1.3 a server that refuses the
// client's certificate says so after the handshake, and fasthttp reports
// that as a connection closed before the answer, losing the reason
// ("certificate required") that an operator needs.
func UseFast(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" {
		return false
	}
	p, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	return err == nil && p == nil
}

// fastHeaders is a propagation.TextMapCarrier on a fasthttp request.
type fastHeaders struct{ h *fasthttp.RequestHeader }

func (f fastHeaders) Get(k string) string { return string(f.h.Peek(k)) }
func (f fastHeaders) Set(k, v string) {
	if k == "Content-Type" {
		f.h.SetContentType(v)
		return
	}
	f.h.Set(k, v)
}
func (f fastHeaders) Keys() []string {
	var out []string
	for k := range f.h.All() {
		out = append(out, string(k))
	}
	return out
}

// afterFuncer is a context that runs a function once it ends, as
// context.AfterFunc does: the worker's handler context is one
// (engine.handlerCtx). Asked directly, it costs a closure and a list
// entry; context.AfterFunc on it costs a cancelCtx of its own, three
// closures and the handler context's Done channel, made for it (~1.5 µs
// of a work process' CPU per webhook call; bench-scale's profile).
type afterFuncer interface {
	AfterFunc(f func()) (stop func() bool)
}

// handleFast is Handle through h.Fast.
func (h *Webhook) handleFast(ctx context.Context, t *worker.Task, target string) error {
	// fasthttp cannot cancel a call: every call has a deadline (the engine
	// gives every task a timeout; maxFastCall bounds a context without
	// one), and the context's end cuts its connection (FastClient)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(maxFastCall)
	}
	if err := ctx.Err(); err != nil {
		return callError(target, ctxError(ctx))
	}
	host, slot, call, err := h.Fast.acquire(ctx, h.URL)
	if err != nil {
		if ctx.Err() != nil {
			err = ctxError(ctx)
		}
		return callError(target, err)
	}
	defer host.release(slot)
	if af, ok := ctx.(afterFuncer); ok {
		stop := af.AfterFunc(func() { slot.abort(call) })
		defer stop()
	} else if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { slot.abort(call) })
		defer stop()
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer releaseFast(req, resp) // before the slot is released: the answer's stream holds its connection
	req.SetRequestURI(h.URL)
	req.Header.SetMethod(http.MethodPost)
	ctx, span := h.setHeaders(ctx, t, target, fastHeaders{&req.Header})
	if span != nil {
		defer span.End()
	}
	req.SetBodyRaw(t.Payload) // not copied: the task outlives the request (released below)
	err = slot.hc.DoDeadline(req, resp, deadline)
	if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = ctxError(ctx) // cut short by its context's end
	}
	status := 0
	if err == nil {
		status = resp.StatusCode()
	}
	if span != nil {
		endWebhookSpan(span, status, err)
	}
	if err != nil {
		return callError(target, err)
	}
	var excerpt []byte
	if body := resp.BodyStream(); body != nil {
		excerpt = answerExcerpt(status, body)
	} else if !succeeded(status) {
		excerpt = bytes.Clone(resp.Body()[:min(len(resp.Body()), excerptMax)])
	}
	return classify(target, status, string(resp.Header.Peek("Retry-After")), excerpt, time.Now())
}

// maxFastCall is the deadline of a fast call whose context has none.
const maxFastCall = 10 * time.Minute

// releaseFast gives a call's request and response back to fasthttp.
func releaseFast(req *fasthttp.Request, resp *fasthttp.Response) {
	fasthttp.ReleaseRequest(req)
	fasthttp.ReleaseResponse(resp)
}

// ctxError is the error of an ended context, with its cause when it has
// one of its own.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); !errors.Is(cause, err) {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// timeoutErr is a fasthttp timeout that also reads as
// context.DeadlineExceeded, as net/http's does.
type timeoutErr struct{ err error }

func (e timeoutErr) Error() string { return e.err.Error() }
func (e timeoutErr) Unwrap() []error {
	return []error{e.err, context.DeadlineExceeded}
}
