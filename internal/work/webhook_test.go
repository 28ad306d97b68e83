package work

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/worker"
)

func TestSignature(t *testing.T) {
	// computed independently: python3 -c "import hmac,hashlib;
	// print(hmac.new(b'topsecret', b'order-1.3.{\"order\":42}', hashlib.sha256).hexdigest())"
	got := Signature([]byte("topsecret"), "order-1", 3, []byte(`{"order":42}`))
	want := "sha256=cb951ee98dd3dca0e2c57ad9913f46e3720dede285f370b10f4a09757fa18060"
	if got != want {
		t.Errorf("Signature = %s, want %s", got, want)
	}
	if Signature([]byte("topsecret"), "order-1", 4, []byte(`{"order":42}`)) == want {
		t.Error("the attempt is not signed")
	}
}

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const (
		done = iota
		retry
		retryAfter
		permanent
	)
	for _, c := range []struct {
		status     int
		retryAfter string
		want       int
		delay      time.Duration
	}{
		{200, "", done, 0},
		{201, "", done, 0},
		{204, "", done, 0},
		{299, "", done, 0},
		{408, "", retry, 0},
		{429, "", retry, 0},
		{429, "7", retryAfter, 7 * time.Second},
		{429, " 120 ", retryAfter, 2 * time.Minute},
		{429, "0", retryAfter, time.Millisecond}, // "now": the smallest delay
		{429, "Fri, 02 Jan 2026 03:05:05 GMT", retryAfter, time.Minute},
		{503, "Fri, 02 Jan 2026 03:04:00 GMT", retryAfter, time.Millisecond}, // in the past
		{429, "999999999999", retryAfter, 24 * time.Hour},
		{429, "soon", retry, 0},
		{429, "-5", retry, 0},
		{408, "3", retryAfter, 3 * time.Second},
		{500, "", retry, 0},
		{502, "", retry, 0},
		{503, "30", retryAfter, 30 * time.Second},
		{599, "", retry, 0},
		{400, "", permanent, 0},
		{401, "", permanent, 0},
		{404, "30", permanent, 0},
		{409, "", permanent, 0},
		{422, "", permanent, 0},
		{301, "", permanent, 0},
		{302, "", permanent, 0},
		{100, "", permanent, 0},
	} {
		err := classify("http://sink/x", c.status, c.retryAfter, []byte("body text"), now)
		var got int
		d, hasDelay := worker.RetryDelay(err)
		switch {
		case err == nil:
			got = done
		case worker.IsPermanent(err):
			got = permanent
		case hasDelay:
			got = retryAfter
		default:
			got = retry
		}
		if got != c.want || d != c.delay {
			t.Errorf("%d Retry-After %q: outcome %d delay %v, want %d %v (err %v)", c.status, c.retryAfter, got, d, c.want, c.delay, err)
		}
		if err != nil && !strings.Contains(err.Error(), "body text") {
			t.Errorf("%d: error %q lacks the body excerpt", c.status, err)
		}
	}
}

func TestPrintableExcerpt(t *testing.T) {
	got := printable([]byte("line one\nline\ttwo\x00\xff " + strings.Repeat("é", 300)))
	if strings.ContainsAny(got, "\n\t\x00") || !strings.HasPrefix(got, "line one line two ") || len(got) > 210 || !strings.HasSuffix(got, "...") {
		t.Errorf("excerpt %q", got)
	}
}

func TestWebhookRequest(t *testing.T) { forEachClient(t, nil, testWebhookRequest) }

func testWebhookRequest(t *testing.T, use func(*Webhook)) {
	var got *http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		body, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	// credentials in the URL go as basic authentication
	h, err := NewWebhook(strings.Replace(srv.URL, "http://", "http://svc:pw@", 1)+"/hook?token=abc", 0, []byte("s3"), NewHTTPClient(2, nil))
	if err != nil {
		t.Fatal(err)
	}
	use(h)
	due := time.UnixMilli(1700000000123)
	tk := &worker.Task{ID: "order-1", Type: "order.cancel", Payload: []byte(`{"a":1}`), ContentType: "application/json",
		Attempt: 2, MaxAttempts: 5, Gen: 9, DueAt: due}
	if err := h.Handle(t.Context(), tk); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Content-Type": "application/json", "Dq-Id": "order-1", "Dq-Type": "order.cancel", "Dq-Attempt": "2",
		"Dq-Max-Attempts": "5", "Dq-Gen": "9", "Dq-Due-At": "1700000000123",
		"Dq-Signature": Signature([]byte("s3"), "order-1", 2, []byte(`{"a":1}`)),
	}
	for k, v := range want {
		if g := got.Header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if got.Method != http.MethodPost || got.URL.Path != "/hook" || got.URL.Query().Get("token") != "abc" || string(body) != `{"a":1}` {
		t.Errorf("request %s %s body %q", got.Method, got.URL, body)
	}
	if u, p, ok := got.BasicAuth(); !ok || u != "svc" || p != "pw" {
		t.Errorf("basic auth %q %q %v, want the URL's", u, p, ok)
	}
	// no secret: no signature
	h.Secret = nil
	_ = h.Handle(t.Context(), tk)
	if got.Header.Get("Dq-Signature") != "" || got.Header.Get("Webhook-Signature") != "" {
		t.Error("signature without a secret")
	}
}

// The request carries the Standard Webhooks headers, which the public
// verifier accepts, for a raw secret and a whsec_ one; the signature
// covers the id, the attempt, the time and the body.
func TestWebhookStandardSignature(t *testing.T) { forEachClient(t, nil, testWebhookStandardSignature) }

func testWebhookStandardSignature(t *testing.T, use func(*Webhook)) {
	var hdr http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr = r.Header.Clone()
		body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	sent := time.Unix(1700000000, 0)
	for _, secret := range []string{"s3", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		h, err := NewWebhook(srv.URL+"/hook", 0, []byte(secret), NewHTTPClient(2, nil))
		if err != nil {
			t.Fatal(err)
		}
		use(h)
		h.now = func() time.Time { return sent }
		tk := &worker.Task{ID: "order.1", Type: "t", Payload: []byte(`{"a":1}`), ContentType: "application/json", Attempt: 2, MaxAttempts: 5}
		if err := h.Handle(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
		if g := hdr.Get("Webhook-Id"); g != "order%2E1:2" {
			t.Errorf("%s: webhook-id %q", secret, g)
		}
		if g := hdr.Get("Webhook-Timestamp"); g != "1700000000" {
			t.Errorf("%s: webhook-timestamp %q", secret, g)
		}
		if g := hdr.Get("Webhook-Signature"); !strings.HasPrefix(g, "v1,") {
			t.Errorf("%s: webhook-signature %q", secret, g)
		}
		// the legacy header is still sent, with the decoded key
		key, _ := worker.WebhookSecret(secret)
		if g := hdr.Get("Dq-Signature"); g != Signature(key, "order.1", 2, body) {
			t.Errorf("%s: Dq-Signature %q", secret, g)
		}
		if time.Since(sent) < time.Hour {
			t.Fatal("the test's clock")
		}
		// sent long ago: a replay now is refused; within the tolerance of
		// the send time it verifies
		if err := worker.VerifyWebhook(secret, hdr, body, 5*time.Minute); !errors.Is(err, worker.ErrWebhookTimestamp) {
			t.Errorf("%s: replay: %v", secret, err)
		}
		h.now = nil
		if err := h.Handle(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
		if err := worker.VerifyWebhook(secret, hdr, body, 5*time.Minute); err != nil {
			t.Errorf("%s: fresh request: %v", secret, err)
		}
	}
	if _, err := NewWebhook(srv.URL, 0, []byte("whsec_not base64!"), nil); err == nil || !strings.Contains(err.Error(), "DQ_WEBHOOK_SECRET") {
		t.Errorf("bad whsec_ secret: %v", err)
	}
}

func TestWebhookErrors(t *testing.T) { forEachClient(t, nil, testWebhookErrors) }

func testWebhookErrors(t *testing.T, use func(*Webhook)) {
	mux := http.NewServeMux()
	slowEnded := make(chan time.Time, 8) // when the sink saw a slow request end
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		slowEnded <- time.Now()
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		t.Error("redirect followed")
	})
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such order", http.StatusGone)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/x"
	ln.Close()

	client := NewHTTPClient(2, nil)
	tk := &worker.Task{ID: "a", Type: "t", Attempt: 1, MaxAttempts: 3, ContentType: "application/octet-stream"}
	for _, c := range []struct {
		url       string
		timeout   time.Duration
		permanent bool
		contains  string
	}{
		{srv.URL + "/slow", 100 * time.Millisecond, false, "timed out"},
		{closed, 0, false, "connection refused"},
		{srv.URL + "/moved", 0, true, "302"},
		{srv.URL + "/gone", 0, true, "410 Gone: no such order"},
	} {
		h, err := NewWebhook(c.url, c.timeout, nil, client)
		if err != nil {
			t.Fatal(err)
		}
		use(h)
		err = h.Handle(t.Context(), tk)
		if err == nil || worker.IsPermanent(err) != c.permanent || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: err %v (permanent %v), want permanent=%v containing %q", c.url, err, worker.IsPermanent(err), c.permanent, c.contains)
		}
	}
	// the task's own deadline also ends the request (and is retried)
	h, _ := NewWebhook(srv.URL+"/slow", 0, nil, client)
	use(h)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := h.Handle(ctx, tk); err == nil || worker.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("task deadline: %v", err)
	}
	<-slowEnded // the timeouts' requests
	<-slowEnded
	// and its cancellation (a lost slot, the worker's hard stop) returns
	// at once, naming the cause, and ends the request: its connection is
	// closed, so the sink sees it end too (both clients; the fast one
	// cuts its connection's deadline short: webhookfast.go)
	cancelled := func(what string, wrap func(context.Context) context.Context) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		t.Cleanup(cancel)
		ctx, cancelNow := context.WithCancelCause(ctx)
		time.AfterFunc(50*time.Millisecond, func() { cancelNow(errors.New("slot lost")) })
		start := time.Now()
		if err := h.Handle(wrap(ctx), tk); err == nil || !strings.Contains(err.Error(), "slot lost") || time.Since(start) > 2*time.Second {
			t.Errorf("cancelled after 50ms (%s): %v after %v", what, err, time.Since(start))
		}
		select {
		case end := <-slowEnded:
			if d := end.Sub(start); d > 2*time.Second {
				t.Errorf("the sink saw the cancelled request end %v after it began (%s)", d, what)
			}
		case <-time.After(4 * time.Second):
			t.Errorf("the sink never saw the cancelled request end (%s)", what)
		}
		return ctx
	}
	ctx = cancelled("a context of the standard library", func(c context.Context) context.Context { return c })
	// the same through a context with an AfterFunc of its own (the
	// worker's handler context), which the fast client asks directly
	if h.Fast != nil {
		var own *ownAfterFunc
		cancelled("a context with its own AfterFunc", func(c context.Context) context.Context {
			own = &ownAfterFunc{Context: c}
			return own
		})
		if own.calls.Load() != 1 {
			t.Errorf("the fast client called the context's own AfterFunc %d times, want 1", own.calls.Load())
		}
	}
	// a cancelled call leaves nothing behind: the next calls of the
	// webhook go through (the fast client's slot is reused)
	for range 3 {
		if err := h.Handle(ctx, tk); err == nil || !strings.Contains(err.Error(), "slot lost") {
			t.Errorf("a call with an ended context: %v", err)
		}
	}
	hg, _ := NewWebhook(srv.URL+"/gone", 0, nil, client)
	hg.Fast = h.Fast
	for range 3 {
		if err := hg.Handle(t.Context(), tk); err == nil || !strings.Contains(err.Error(), "410") {
			t.Errorf("after a cancelled call: %v", err)
		}
	}
	// a long answer is read to its bounds, and the call still succeeds
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 1<<20))
	}))
	defer big.Close()
	h, _ = NewWebhook(big.URL, 0, nil, client)
	use(h)
	if err := h.Handle(t.Context(), tk); err != nil {
		t.Errorf("a 1 MiB answer: %v", err)
	}
	client.CloseIdleConnections()
}

// The fast client is for plain http URLs without a proxy.
func TestUseFast(t *testing.T) {
	for u, want := range map[string]bool{"http://sink:8080/hook": true, "https://sink/hook": false, "::bad": false} {
		if got := UseFast(u); got != want {
			t.Errorf("UseFast(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestNewWebhookChecksURL(t *testing.T) {
	for _, u := range []string{"", "ftp://x/y", "http://", "/relative", "http://a b/", "gopher://user:pw@host/?q=secret"} {
		if _, err := NewWebhook(u, 0, nil, nil); err == nil {
			t.Errorf("%q accepted", u)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error leaks credentials: %v", err)
		}
	}
}

// Retry-After comes from the webhook's server: any value parses without
// panicking into a delay between 0 and a day.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "-1", "Fri, 02 Jan 2026 03:05:05 GMT", "Friday, 02-Jan-26 03:05:05 GMT", "soon", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, now)
		if ok && (d < 0 || d > maxRetryAfter) {
			t.Fatalf("%q: %v", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("%q: not ok but %v", v, d)
		}
	})
}

// forEachClient runs test with a webhook's net/http client and with its
// fast client (webhookfast.go; tlsConf for https, which UseFast keeps on
// net/http).
func forEachClient(t *testing.T, tlsConf *tls.Config, test func(t *testing.T, use func(*Webhook))) {
	t.Run("net/http", func(t *testing.T) { test(t, func(*Webhook) {}) })
	fast := NewFastClient(2, tlsConf)
	t.Run("fasthttp", func(t *testing.T) { test(t, func(h *Webhook) { h.Fast = fast }) })
}

// ownAfterFunc is a context with an AfterFunc method of its own, as the
// worker's handler context has (engine.handlerCtx); it counts the calls.
type ownAfterFunc struct {
	context.Context
	calls atomic.Int32
}

func (c *ownAfterFunc) AfterFunc(f func()) func() bool {
	c.calls.Add(1)
	return context.AfterFunc(c.Context, f)
}
