package worker

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func signedHeader(key []byte, msgID string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderWebhookID, msgID)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderWebhookSignature, SignWebhook(key, msgID, ts, body))
	return h
}

// The test vector of the Standard Webhooks reference libraries
// (libraries/go/webhook_test.go, TestWebhookSign); the same value by
// openssl:
//
//	printf '%s' 'msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}' |
//	  openssl dgst -sha256 -mac HMAC -macopt hexkey:$(printf '%s' MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw | base64 -d | xxd -p -c 256) -binary | base64
func TestSignWebhookSpecVector(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	key, err := WebhookSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	if got := SignWebhook(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body); got != want {
		t.Fatalf("SignWebhook = %s, want %s", got, want)
	}
	h := http.Header{}
	h.Set("Webhook-Id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("Webhook-Timestamp", "1614265330")
	h.Set("Webhook-Signature", want)
	if err := verifyWebhook(secret, h, body, time.Minute, ts.Add(30*time.Second)); err != nil {
		t.Fatalf("the spec's own request does not verify: %v", err)
	}
}

// A raw secret (no whsec_ prefix) is used as its bytes; computed with
// printf '%s' 'order-1:3.1700000000.{"order":42}' | openssl dgst -sha256 -hmac topsecret -binary | base64
func TestSignWebhookRawSecret(t *testing.T) {
	key, err := WebhookSecret("topsecret")
	if err != nil {
		t.Fatal(err)
	}
	got := SignWebhook(key, WebhookID("order-1", 3), time.Unix(1700000000, 0), []byte(`{"order":42}`))
	if want := "v1,CP5PBKyriab+Ttd0uMmSCD878MyRlhM7Ia3UZ5MO2N0="; got != want {
		t.Fatalf("SignWebhook = %s, want %s", got, want)
	}
}

func TestVerifyWebhookRoundTrip(t *testing.T) {
	body := []byte(`{"order":42}`)
	for _, secret := range []string{"topsecret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		key, err := WebhookSecret(secret)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		h := signedHeader(key, WebhookID("order.1:x", 2), now, body)
		if err := VerifyWebhook(secret, h, body, 0); err != nil {
			t.Fatalf("%s: round trip: %v", secret, err)
		}
		// several signatures (a secret being rotated): any one may match
		h.Set(HeaderWebhookSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,xyz garbage "+h.Get(HeaderWebhookSignature))
		if err := VerifyWebhook(secret, h, body, 0); err != nil {
			t.Fatalf("%s: the valid one of several signatures: %v", secret, err)
		}
		if err := VerifyWebhook(secret, h, []byte(`{"order":43}`), 0); !errors.Is(err, ErrWebhookNoSignature) {
			t.Fatalf("%s: changed body: %v", secret, err)
		}
		if err := VerifyWebhook(secret+"x", h, body, 0); !errors.Is(err, ErrWebhookNoSignature) && !errors.Is(err, ErrWebhookSecret) {
			t.Fatalf("%s: other secret: %v", secret, err)
		}
		other := h.Clone()
		other.Set(HeaderWebhookID, WebhookID("order.1:x", 3))
		if err := VerifyWebhook(secret, other, body, 0); !errors.Is(err, ErrWebhookNoSignature) {
			t.Fatalf("%s: another attempt's id accepted: %v", secret, err)
		}
	}
}

func TestVerifyWebhookReplayOutsideTolerance(t *testing.T) {
	key := []byte("topsecret")
	body := []byte(`{}`)
	sent := time.Unix(1700000000, 0)
	h := signedHeader(key, WebhookID("t1", 1), sent, body)
	for _, c := range []struct {
		now time.Time
		ok  bool
	}{
		{sent, true},
		{sent.Add(5 * time.Minute), true},
		{sent.Add(-5 * time.Minute), true}, // the sender's clock a little ahead
		{sent.Add(5*time.Minute + time.Second), false},
		{sent.Add(-5*time.Minute - time.Second), false},
		{sent.Add(24 * time.Hour), false},
	} {
		err := verifyWebhook("topsecret", h, body, 5*time.Minute, c.now)
		if c.ok && err != nil {
			t.Errorf("now = sent%+v: %v", c.now.Sub(sent), err)
		}
		if !c.ok && !errors.Is(err, ErrWebhookTimestamp) {
			t.Errorf("now = sent%+v: want ErrWebhookTimestamp, got %v", c.now.Sub(sent), err)
		}
	}
	// moving the timestamp forward breaks the signature
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(sent.Add(time.Hour).Unix(), 10))
	if err := verifyWebhook("topsecret", h, body, 5*time.Minute, sent.Add(time.Hour)); !errors.Is(err, ErrWebhookNoSignature) {
		t.Fatalf("a replay with a fresh timestamp: want ErrWebhookNoSignature, got %v", err)
	}
}

func TestVerifyWebhookBadInput(t *testing.T) {
	body := []byte(`{}`)
	now := time.Unix(1700000000, 0)
	good := signedHeader([]byte("s"), "m:1", now, body)
	for name, c := range map[string]struct {
		secret string
		mutate func(http.Header)
		want   error
	}{
		"no id":           {"s", func(h http.Header) { h.Del(HeaderWebhookID) }, ErrWebhookHeader},
		"no timestamp":    {"s", func(h http.Header) { h.Del(HeaderWebhookTimestamp) }, ErrWebhookHeader},
		"no signature":    {"s", func(h http.Header) { h.Del(HeaderWebhookSignature) }, ErrWebhookHeader},
		"timestamp in ms": {"s", func(h http.Header) { h.Set(HeaderWebhookTimestamp, "1700000000000") }, ErrWebhookTimestamp},
		"timestamp text":  {"s", func(h http.Header) { h.Set(HeaderWebhookTimestamp, "yesterday") }, ErrWebhookHeader},
		"timestamp +":     {"s", func(h http.Header) { h.Set(HeaderWebhookTimestamp, "+1700000000") }, ErrWebhookHeader},
		"only v2": {"s", func(h http.Header) {
			h.Set(HeaderWebhookSignature, strings.Replace(h.Get(HeaderWebhookSignature), "v1,", "v2,", 1))
		}, ErrWebhookNoSignature},
		"empty secret":       {"", nil, ErrWebhookSecret},
		"bad whsec base64":   {"whsec_!!!", nil, ErrWebhookSecret},
		"empty whsec":        {"whsec_", nil, ErrWebhookSecret},
		"truncated sig":      {"s", func(h http.Header) { h.Set(HeaderWebhookSignature, h.Get(HeaderWebhookSignature)[:20]) }, ErrWebhookNoSignature},
		"signature no comma": {"s", func(h http.Header) { h.Set(HeaderWebhookSignature, "v1") }, ErrWebhookNoSignature},
	} {
		h := good.Clone()
		if c.mutate != nil {
			c.mutate(h)
		}
		if err := verifyWebhook(c.secret, h, body, time.Minute, now); !errors.Is(err, c.want) {
			t.Errorf("%s: want %v, got %v", name, c.want, err)
		}
	}
}

// The old Dq-Signature signed id + "." + attempt + "." + body, so task
// "a.1" attempt 2 body "x" and task "a" attempt 1 body "2.x" signed the
// same string. The webhook-id escapes the id's dots and ends in
// ":<attempt>", so the two differ, and each webhook-id names one (id,
// attempt).
func TestWebhookIDUnambiguous(t *testing.T) {
	key := []byte("k")
	ts := time.Unix(1700000000, 0)
	a := SignWebhook(key, WebhookID("a.1", 2), ts, []byte("x"))
	b := SignWebhook(key, WebhookID("a", 1), ts, []byte("2.x"))
	if a == b {
		t.Fatal(`("a.1", 2, "x") and ("a", 1, "2.x") sign the same string`)
	}
	// the id's dots cannot shift the boundary with the timestamp either
	c := SignWebhook(key, WebhookID("a.1700000000", 1), time.Unix(1700000001, 0), []byte("b"))
	d := SignWebhook(key, WebhookID("a", 1), ts, []byte("1700000001.b"))
	if c == d {
		t.Fatal("an id's dot moved the timestamp boundary")
	}
	seen := map[string]string{}
	for _, id := range []string{"a", "a.1", "a%2E1", "a%1", "a:1", "a:1:2", "a.", "."} {
		for _, att := range []int{1, 2, 12} {
			w := WebhookID(id, att)
			if strings.Contains(w, ".") {
				t.Errorf("WebhookID(%q, %d) = %q holds a dot", id, att, w)
			}
			k := id + "\x00" + strconv.Itoa(att)
			if prev, dup := seen[w]; dup {
				t.Errorf("WebhookID %q names both %q and %q", w, prev, k)
			}
			seen[w] = k
		}
	}
}
