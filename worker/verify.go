package worker

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook signing follows the Standard Webhooks specification
// (https://www.standardwebhooks.com): every signed request carries
//
//	webhook-id:        <task id, '.' and '%' escaped>:<attempt>
//	webhook-timestamp: <unix seconds when it was sent>
//	webhook-signature: v1,<base64 HMAC-SHA256(secret, "<webhook-id>.<timestamp>.<body>")>
//
// The signed string is unambiguous: the webhook-id holds no '.' (the task
// id's '.' and '%' are percent-escaped) and the timestamp is digits only,
// so its first two dots split it back into exactly one (id, timestamp,
// body). The attempt follows the id's last ':' and is digits only, so the
// webhook-id splits back into exactly one (task id, attempt). The
// timestamp is signed, so a captured request replays only within the
// receiver's tolerance.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"

	// DefaultWebhookTolerance is how far a webhook-timestamp may be from
	// the receiver's clock, either way, when VerifyWebhook is given 0.
	DefaultWebhookTolerance = 5 * time.Minute

	secretPrefix = "whsec_"
)

// Errors of VerifyWebhook; test with errors.Is.
var (
	ErrWebhookSecret      = errors.New("webhook secret: empty, or whsec_ followed by invalid base64")
	ErrWebhookHeader      = errors.New("webhook: missing or malformed header")
	ErrWebhookTimestamp   = errors.New("webhook: timestamp outside the tolerance")
	ErrWebhookNoSignature = errors.New("webhook: no valid v1 signature")
)

// WebhookSecret decodes a signing secret: "whsec_<base64>" is the
// base64-decoded bytes (the Standard Webhooks form), anything else is
// used as it is.
func WebhookSecret(secret string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(secret, secretPrefix); ok {
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || len(b) == 0 {
			return nil, ErrWebhookSecret
		}
		return b, nil
	}
	if secret == "" {
		return nil, ErrWebhookSecret
	}
	return []byte(secret), nil
}

// WebhookID is the webhook-id header of a task's attempt: the task id
// with '%' and '.' percent-escaped, ':', the attempt.
func WebhookID(taskID string, attempt int) string {
	id := strings.NewReplacer("%", "%25", ".", "%2E").Replace(taskID)
	return id + ":" + strconv.Itoa(attempt)
}

// SignWebhook is the webhook-signature header value of a request:
// "v1," + base64(HMAC-SHA256(key, msgID + "." + unix seconds + "." + body)).
// key is the decoded secret (see WebhookSecret).
func SignWebhook(key []byte, msgID string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, msgID, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(key []byte, msgID, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifyWebhook checks a delayq webhook request (or any Standard Webhooks
// request): secret is the one the work process signs with (raw, or
// whsec_<base64>), header and body the request's, read in full and
// unchanged. It accepts the request when webhook-timestamp is within
// tolerance of now (0: DefaultWebhookTolerance) and one of the
// space-separated v1 signatures matches (compared in constant time).
// Check webhook-id against the ids you already handled to drop a replay
// within the tolerance, or a redelivered attempt.
func VerifyWebhook(secret string, header http.Header, body []byte, tolerance time.Duration) error {
	return verifyWebhook(secret, header, body, tolerance, time.Now())
}

func verifyWebhook(secret string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := WebhookSecret(secret)
	if err != nil {
		return err
	}
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	id := header.Get(HeaderWebhookID)
	tsText := header.Get(HeaderWebhookTimestamp)
	sigs := header.Get(HeaderWebhookSignature)
	switch {
	case id == "":
		return fmt.Errorf("%w: %s is missing", ErrWebhookHeader, HeaderWebhookID)
	case tsText == "":
		return fmt.Errorf("%w: %s is missing", ErrWebhookHeader, HeaderWebhookTimestamp)
	case sigs == "":
		return fmt.Errorf("%w: %s is missing", ErrWebhookHeader, HeaderWebhookSignature)
	}
	secs, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil || secs < 0 || strings.HasPrefix(tsText, "+") {
		return fmt.Errorf("%w: %s %q is not unix seconds", ErrWebhookHeader, HeaderWebhookTimestamp, tsText)
	}
	ts := time.Unix(secs, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s is %s from now, tolerance %s", ErrWebhookTimestamp, HeaderWebhookTimestamp, d.Round(time.Second), tolerance)
	}
	want := mac(key, id, tsText, body)
	for _, s := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue // other versions (v1a: asymmetric) are not ours
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrWebhookNoSignature
}
