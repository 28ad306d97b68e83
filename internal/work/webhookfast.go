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
	"time"

	"github.com/valyala/fasthttp"

	"github.com/delayq/delayq/worker"
)

// The webhook's fast client. net/http's client costs a work process
// ~21 µs of CPU per request on the 2-core VM (its connection's read and
// write loops are goroutines of their own: three goroutines hand every
// request and answer over), fasthttp's ~10 µs with one goroutine per
// request (BenchmarkWebhookClients; the webhook is ~45% of a work
// process' CPU per task in bench-scale). It is used where it behaves as
// net/http does for a webhook: HTTP/1.1, no redirects followed,
// credentials in the URL sent as basic authentication, deadlines from the
// task's context and its cancellation ending the handler, answers read to
// the same bounds; for plain http URLs that no proxy from the environment
// (HTTP_PROXY, NO_PROXY) applies to (UseFast).

// NewFastClient is the fast client the app's webhooks share: up to
// 4×maxConns connections to a host (a request waits up to a minute for
// one), tlsConf for https (nil: the system's roots), paths sent as
// written, header names in canonical form (as net/http sends them), both
// IP families dialled (net.Dialer), answers streamed so that their size
// does not matter. Its cleaners (fasthttp's goroutines that close idle
// connections) end some time after CloseIdleConnections.
func NewFastClient(maxConns int, tlsConf *tls.Config) *fasthttp.Client {
	return &fasthttp.Client{
		Name:                "delayq-work",
		MaxConnsPerHost:     4 * max(maxConns, 1),
		MaxConnWaitTimeout:  time.Minute,
		MaxIdleConnDuration: 90 * time.Second, // net/http's IdleConnTimeout
		ReadBufferSize:      32 << 10,         // the answer's headers must fit
		TLSConfig:           tlsConf,
		// net's dialer (both IP families): fasthttp's own keeps a
		// process-wide goroutine and address cache
		Dial: func(addr string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).Dial("tcp", addr)
		},
		DisablePathNormalizing:   true,
		NoDefaultUserAgentHeader: true,
		StreamResponseBody:       true,
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

// handleFast is Handle through h.Fast.
func (h *Webhook) handleFast(ctx context.Context, t *worker.Task, target string) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI(h.URL)
	req.Header.SetMethod(http.MethodPost)
	ctx, span := h.setHeaders(ctx, t, target, fastHeaders{&req.Header})
	if span != nil {
		defer span.End()
	}
	req.SetBody(t.Payload)
	abandoned, err := h.doFast(ctx, req, resp)
	if !abandoned { // else the call's goroutine releases them
		defer releaseFast(req, resp)
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

// doFast sends req within ctx's deadline. A context that can end sooner
// (cancelled) waits for the call on a goroutine of its own: when ctx ends
// first it returns at once, abandoned, with ctx's error (and its cause),
// and that goroutine releases req and resp once the call returns.
func (h *Webhook) doFast(ctx context.Context, req *fasthttp.Request, resp *fasthttp.Response) (abandoned bool, err error) {
	// fasthttp cannot cancel a call: one abandoned goes on until its
	// deadline, so every call has one (the engine gives every task a
	// timeout; maxFastCall bounds a context without one)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(maxFastCall)
	}
	do := func() error { return h.Fast.DoDeadline(req, resp, deadline) }
	if ctx.Done() == nil {
		return false, do()
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	done := make(chan struct{ err error }, 1)
	go func() { done <- struct{ err error }{do()} }()
	select {
	case r := <-done:
		return false, r.err
	case <-ctx.Done():
		go func() {
			<-done // the call's outcome is no one's any more
			releaseFast(req, resp)
		}()
		err = ctx.Err()
		if cause := context.Cause(ctx); !errors.Is(cause, err) {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		return true, err
	}
}

// timeoutErr is a fasthttp timeout that also reads as
// context.DeadlineExceeded, as net/http's does.
type timeoutErr struct{ err error }

func (e timeoutErr) Error() string { return e.err.Error() }
func (e timeoutErr) Unwrap() []error {
	return []error{e.err, context.DeadlineExceeded}
}
