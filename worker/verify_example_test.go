package worker_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/worker"
)

// A webhook receiver checks every delayq request before acting on it.
func ExampleVerifyWebhook() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // DQ_WEBHOOK_SECRET of the work process
	receive := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if err := worker.VerifyWebhook(secret, r.Header, body, 5*time.Minute); err != nil {
			// 4xx: delayq does not retry it
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Println("verified", r.Header.Get("Dq-Id"), "attempt", r.Header.Get("Dq-Attempt"))
	}

	// what the work process sends (normally over HTTP)
	body := `{"order":42}`
	key, _ := worker.WebhookSecret(secret)
	msgID := worker.WebhookID("order-42", 1)
	now := time.Now()
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	req.Header.Set("Dq-Id", "order-42")
	req.Header.Set("Dq-Attempt", "1")
	req.Header.Set(worker.HeaderWebhookID, msgID)
	req.Header.Set(worker.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(worker.HeaderWebhookSignature, worker.SignWebhook(key, msgID, now, []byte(body)))
	receive(httptest.NewRecorder(), req)

	// the same request an hour later is refused
	req.Header.Set(worker.HeaderWebhookTimestamp, strconv.FormatInt(now.Add(-time.Hour).Unix(), 10))
	err := worker.VerifyWebhook(secret, req.Header, []byte(body), 5*time.Minute)
	fmt.Println(errors.Is(err, worker.ErrWebhookTimestamp))
	// Output:
	// verified order-42 attempt 1
	// true
}
