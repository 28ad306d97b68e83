package work

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/worker"
)

// Webhook is the built-in handler that POSTs a task to a URL.
type Webhook struct {
	URL     string
	Timeout time.Duration // per request, within the task's own timeout; 0: none of its own
	Secret  []byte        // signs requests when set (decoded: see worker.WebhookSecret)
	Client  *http.Client  // must not follow redirects; see NewHTTPClient
	// Fast, when set, sends the requests instead of Client (webhookfast.go:
	// 14-18 µs less CPU per call); the app sets it where UseFast says so.
	Fast *FastClient

	target string           // URL with secrets redacted, for error messages
	now    func() time.Time // the webhook-timestamp clock; nil: time.Now
}

// NewHTTPClient is the client webhooks share: no redirects (a POST turned
// into a GET by a 302 would silently lose the body), connections kept for
// maxConns concurrent requests per host, deadlines from the task context.
// tlsConf (see WebhookTLS) is used for https webhooks; nil: the system's
// roots and no client certificate.
func NewHTTPClient(maxConns int, tlsConf *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = maxConns
	tr.MaxIdleConns = 4 * maxConns
	if tlsConf != nil {
		tr.TLSClientConfig = tlsConf
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// WebhookTLS is the TLS configuration of https webhooks (nil when f sets
// nothing): a CA (DQ_WEBHOOK_TLS_CA) is trusted in addition to the
// system's roots, so that webhooks behind a private CA and public ones
// work side by side; a certificate and key (DQ_WEBHOOK_TLS_CERT,
// DQ_WEBHOOK_TLS_KEY) are presented to servers that ask for one. Errors
// name the variable at fault.
func WebhookTLS(f config.TLSFiles) (*tls.Config, error) {
	c, err := f.Client() // checks every file; RootCAs is the CA alone
	if err != nil || c == nil || f.CA == "" {
		return c, err
	}
	data, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("DQ_WEBHOOK_TLS_CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool() // no system roots here: the CA alone
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("DQ_WEBHOOK_TLS_CA: %s: no PEM certificate in it", f.CA)
	}
	c.RootCAs = pool
	return c, nil
}

// NewWebhook checks rawURL (http or https, with a host) and builds a
// handler. secret is used as it is, or base64-decoded when it is
// "whsec_<base64>" (the Standard Webhooks form).
func NewWebhook(rawURL string, timeout time.Duration, secret []byte, client *http.Client) (*Webhook, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("webhook url: %w", config.RedactError(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhook url %q: want an http(s) URL with a host", config.RedactURL(rawURL))
	}
	if timeout < 0 {
		return nil, fmt.Errorf("webhook %s: negative timeout", config.RedactURL(rawURL))
	}
	if bytes.HasPrefix(secret, []byte("whsec_")) {
		if secret, err = worker.WebhookSecret(string(secret)); err != nil {
			return nil, fmt.Errorf("webhook-secret (DQ_WEBHOOK_SECRET): %w", err)
		}
	}
	return &Webhook{URL: rawURL, Timeout: timeout, Secret: secret, Client: client, target: config.RedactURL(rawURL)}, nil
}

// Signature is the legacy Dq-Signature header value for a request:
// "sha256=" + hex(HMAC-SHA256(secret, id + "." + attempt + "." + body)).
//
// Deprecated: it has no timestamp (a captured request replays forever)
// and is ambiguous (task "a.1" attempt 2 body "x" signs the same string
// as task "a" attempt 1 body "2.x"); receivers verify the Standard
// Webhooks headers with worker.VerifyWebhook instead. It is still sent
// so that receivers written against it keep working for one release.
func Signature(secret []byte, id string, attempt int, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.Itoa(attempt)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Handle is a worker.HandlerFunc.
func (h *Webhook) Handle(ctx context.Context, t *worker.Task) error {
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	target := h.target
	if target == "" { // built without NewWebhook
		target = config.RedactURL(h.URL)
	}
	if h.Fast != nil {
		return h.handleFast(ctx, t, target)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(t.Payload))
	if err != nil {
		return worker.Permanent(fmt.Errorf("webhook %s: %w", target, config.RedactError(err)))
	}
	_, span := h.setHeaders(ctx, t, target, propagation.HeaderCarrier(req.Header)) // req carries ctx already
	if span != nil {
		defer span.End()
	}
	resp, err := h.Client.Do(req)
	if span != nil {
		endHTTPSpan(span, resp, err)
	}
	if err != nil {
		return callError(target, err)
	}
	defer resp.Body.Close()
	excerpt := answerExcerpt(resp.StatusCode, resp.Body)
	return classify(target, resp.StatusCode, resp.Header.Get("Retry-After"), excerpt, time.Now())
}

// callError is the task's error for a webhook call that got no answer
// (retried): redacted first — net/http's *url.Error holds the whole URL,
// query included — before it becomes the task's last error, dead letter,
// outcome record or a log line; a timeout (the context's, or fasthttp's:
// timeoutErr) says so.
func callError(target string, err error) error {
	err = config.RedactError(err)
	if errors.Is(err, fasthttp.ErrTimeout) {
		err = timeoutErr{err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("webhook %s: timed out: %w", target, err)
	}
	return fmt.Errorf("webhook %s: %w", target, err)
}

// Of a webhook's answer, the first excerptMax bytes are kept for the
// error, and up to drainMax more are read so that the connection is
// reused (a longer answer closes it).
const (
	excerptMax = 256
	drainMax   = 64 << 10
)

// succeeded reports whether a webhook answered status is a success (2xx).
func succeeded(status int) bool { return status >= 200 && status <= 299 }

// answerExcerpt reads what classify needs of an answer's body: nothing of
// a 2xx answer (the common case: no buffer per call), the first
// excerptMax bytes of any other. The rest is drained, up to
// excerptMax+drainMax bytes in all, so that the connection is reused.
func answerExcerpt(status int, body io.Reader) []byte {
	var excerpt []byte
	rest := int64(excerptMax + drainMax)
	if !succeeded(status) {
		excerpt, _ = io.ReadAll(io.LimitReader(body, excerptMax))
		rest -= int64(len(excerpt))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, rest))
	return excerpt
}

// setHeaders sets the headers of a request for t on c: the task's
// metadata, the signatures when the webhook has a secret, and the trace
// context. With tracing on, it starts the request's span (the caller ends
// it) and returns its context.
func (h *Webhook) setHeaders(ctx context.Context, t *worker.Task, target string, c propagation.TextMapCarrier) (context.Context, trace.Span) {
	c.Set("Content-Type", t.ContentType)
	c.Set("User-Agent", "delayq-work")
	c.Set("Dq-Id", t.ID)
	c.Set("Dq-Type", t.Type)
	c.Set("Dq-Attempt", strconv.Itoa(t.Attempt))
	c.Set("Dq-Max-Attempts", strconv.Itoa(t.MaxAttempts))
	c.Set("Dq-Gen", strconv.FormatUint(t.Gen, 10))
	c.Set("Dq-Due-At", strconv.FormatInt(task.Millis(t.DueAt), 10))
	if len(h.Secret) > 0 {
		now := time.Now
		if h.now != nil {
			now = h.now
		}
		ts := now()
		msgID := worker.WebhookID(t.ID, t.Attempt)
		c.Set(worker.HeaderWebhookID, msgID)
		c.Set(worker.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
		c.Set(worker.HeaderWebhookSignature, worker.SignWebhook(h.Secret, msgID, ts, t.Payload))
		c.Set("Dq-Signature", Signature(h.Secret, t.ID, t.Attempt, t.Payload))
	}
	var span trace.Span
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// the attempt's trace (engine/trace.go): a span of this request
		// when tracing is on; its context, or the record's when tracing is
		// off, sent on (traceparent, tracestate, baggage)
		if tracing.On() {
			ctx, span = startWebhookSpan(ctx, "delayq.webhook", target)
		}
		tracing.Propagator.Inject(ctx, c)
	} else if tp := t.Headers[tracing.HeaderTraceparent]; tp != "" {
		// run without the engine's context: the task's own trace context
		c.Set(tracing.HeaderTraceparent, tp)
		if ts := t.Headers[tracing.HeaderTracestate]; ts != "" {
			c.Set(tracing.HeaderTracestate, ts)
		}
	}
	return ctx, span
}

// maxRetryAfter bounds a Retry-After delay.
const maxRetryAfter = 24 * time.Hour

// classify turns a response into an outcome: nil for 2xx; retried for 408,
// 429 and 5xx (after Retry-After when given); permanent otherwise.
func classify(target string, status int, retryAfter string, body []byte, now time.Time) error {
	if succeeded(status) {
		return nil
	}
	err := fmt.Errorf("webhook %s: %d %s", target, status, http.StatusText(status))
	if b := printable(body); b != "" {
		err = fmt.Errorf("%w: %s", err, b)
	}
	if status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 && status <= 599 {
		if d, ok := parseRetryAfter(retryAfter, now); ok {
			return worker.RetryAfter(d, err)
		}
		return worker.Retry(err)
	}
	return worker.Permanent(err)
}

// parseRetryAfter reads a Retry-After value: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}

// printable is a short single-line excerpt of a response body.
func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, string(b))
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "..."
	}
	return s
}

// startWebhookSpan starts the client span of a webhook or hook request
// to target (its URL, redacted), a child of ctx's span.
func startWebhookSpan(ctx context.Context, name, target string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracing.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodPost, semconv.URLFull(target)),
		trace.WithAttributes(attrs...))
}

// endHTTPSpan is endWebhookSpan of a net/http call.
func endHTTPSpan(span trace.Span, resp *http.Response, err error) {
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	endWebhookSpan(span, status, err)
}

// endWebhookSpan sets a request's span's status from its answer's status
// or error: Error for a failed request and for a status that is not 2xx.
// The caller ends the span.
func endWebhookSpan(span trace.Span, status int, err error) {
	if err != nil {
		span.SetStatus(codes.Error, config.RedactError(err).Error())
		return
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	if !succeeded(status) {
		span.SetStatus(codes.Error, strconv.Itoa(status)+" "+http.StatusText(status))
	}
}
