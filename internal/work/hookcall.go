package work

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/tracing"
	"github.com/delayq/delayq/worker"
)

// Delivery of one outcome to one hook: at most hookAttempts HTTP requests,
// hookBackoffFirst, twice that, ... up to hookBackoffLongest apart (with jitter;
// a Retry-After of a 429 or 503 is honoured up to hookBackoffLongest).
const (
	hookAttempts       = 5
	hookBackoffFirst   = time.Second
	hookBackoffLongest = 30 * time.Second
)

// The results of one hook request, as in delayq_hook_calls_total's
// "result" label.
const (
	hookResultOK     = "ok"     // 2xx: delivered
	hookResultRetry  = "retry"  // failed; another request follows
	hookResultFailed = "failed" // failed; the hook gave up on this outcome
)

// hookMetrics are the hooks' Prometheus metrics.
type hookMetrics struct {
	calls    *prometheus.CounterVec   // hook, result
	duration *prometheus.HistogramVec // hook
	skipped  *prometheus.CounterVec   // reason
	refused  *prometheus.CounterVec   // reason: record.Forged's
	lag      prometheus.Gauge
}

func newHookMetrics(reg prometheus.Registerer) *hookMetrics {
	m := &hookMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "hook_calls_total",
			Help: `Outcome hook HTTP requests by hook (on_success, on_failure) and result: ok (2xx), retry (failed, tried again), failed (failed, the outcome's hook given up).`,
		}, []string{"hook", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: admin.Namespace, Name: "hook_call_duration_seconds",
			Help:    "Duration of outcome hook HTTP requests, any result.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"hook"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "hook_records_skipped_total",
			Help: `Outcome records with a hook that called none: invalid (undecodable record) or stale (older than the entry's max_age).`,
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: admin.Namespace, Name: "hook_records_refused_total",
			Help: `Records in the outcomes topic that delayq did not publish, refused without calling a hook: unmarked (no dq-outcome header) or task_record (a task fired into the outcomes topic).`,
		}, []string{"reason"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: admin.Namespace, Name: "hook_consumer_lag",
			Help: "Outcome records not yet read by this process's hooks consumer (kafka-go's figure).",
		}),
	}
	for _, h := range []string{hookOnSuccess, hookOnFailure} {
		for _, r := range []string{hookResultOK, hookResultRetry, hookResultFailed} {
			m.calls.WithLabelValues(h, r)
		}
		m.duration.WithLabelValues(h)
	}
	m.skipped.WithLabelValues("invalid")
	m.skipped.WithLabelValues("stale")
	m.refused.WithLabelValues(record.ForgedUnmarked)
	m.refused.WithLabelValues(record.ForgedTaskRecord)
	reg.MustRegister(m.calls, m.duration, m.skipped, m.refused, m.lag)
	return m
}

// hookCaller POSTs outcome records to hooks.
type hookCaller struct {
	client   *http.Client // no redirects: see NewHTTPClient
	secret   []byte       // decoded (see worker.WebhookSecret); nil: unsigned
	met      *hookMetrics
	log      *slog.Logger
	attempts int           // hookAttempts
	backoff  retry.Backoff // template: hookBackoffFirst..hookBackoffLongest
	now      func() time.Time
}

// hookMessageID is the webhook-id of an outcome's hook requests: the task
// id escaped as for task webhooks (worker.WebhookID), the attempt, the
// outcome and the finish time in unix ms, joined by ':'. It is the same
// for every request and every redelivery of one outcome (receivers drop
// duplicates by it), and differs from the task's own webhook-ids and
// between the outcomes of a redriven task.
func hookMessageID(o *record.OutcomeRecord) string {
	return worker.WebhookID(o.ID, o.Attempt) + ":" + o.Outcome + ":" + strconv.FormatInt(o.FinishedAt.UnixMilli(), 10)
}

// deliver POSTs body (the outcome record's value) to url until a 2xx
// answer, a failure retrying cannot fix (a 4xx other than 408 and 429, a
// redirect, a bad request) or the last of c.attempts requests. It reports
// whether the outcome is finished with (delivered or given up, so its
// offset may be committed): false when stop ended first (the request in
// flight is let finish within callCtx; a wait between requests is not),
// so that the outcome is delivered again after a restart.
func (c *hookCaller) deliver(stop, callCtx context.Context, hook, url string, timeout time.Duration, o *record.OutcomeRecord, body []byte) bool {
	target := config.RedactURL(url)
	bo := c.backoff
	log := c.log.With("task_id", o.ID, "type", o.Type, "outcome", o.Outcome, "hook", hook, "url", target)
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := c.post(callCtx, hook, url, target, timeout, o, body, attempt)
		c.met.duration.WithLabelValues(hook).Observe(time.Since(start).Seconds())
		switch {
		case err == nil:
			c.met.calls.WithLabelValues(hook, hookResultOK).Inc()
			log.Debug("hook called", "attempt", attempt)
			return true
		case callCtx.Err() != nil:
			// abandoned at the shutdown deadline: not a result of the hook
			log.Warn("hook call abandoned at shutdown; called again after a restart", "attempt", attempt, "err", err)
			return false
		case worker.IsPermanent(err) || attempt >= c.attempts:
			c.met.calls.WithLabelValues(hook, hookResultFailed).Inc()
			log.Warn("hook failed; giving up on this outcome", "attempt", attempt, "permanent", worker.IsPermanent(err), "err", err)
			return true
		}
		c.met.calls.WithLabelValues(hook, hookResultRetry).Inc()
		delay := bo.Next()
		if d, ok := worker.RetryDelay(err); ok {
			delay = min(d, max(bo.Max, bo.Min))
		}
		log.Info("hook failed; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		if stop.Err() != nil || !retry.Sleep(stop, delay) {
			log.Info("hook retry abandoned at shutdown; called again after a restart", "attempt", attempt)
			return false
		}
	}
}

// post makes one request. Its error is classified as the task webhooks'
// (see classify): nil, worker.Permanent, or retryable.
func (c *hookCaller) post(ctx context.Context, hook, url, target string, timeout time.Duration, o *record.OutcomeRecord, body []byte, attempt int) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return worker.Permanent(fmt.Errorf("hook %s: %w", target, config.RedactError(err)))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "delayq-work")
	req.Header.Set("Dq-Hook", hook)
	req.Header.Set("Dq-Hook-Attempt", strconv.Itoa(attempt))
	req.Header.Set("Dq-Id", o.ID)
	req.Header.Set("Dq-Type", o.Type)
	req.Header.Set("Dq-Outcome", o.Outcome)
	req.Header.Set("Dq-Attempt", strconv.Itoa(o.Attempt))
	if len(c.secret) > 0 {
		now := time.Now
		if c.now != nil {
			now = c.now
		}
		ts := now()
		msgID := hookMessageID(o)
		req.Header.Set(worker.HeaderWebhookID, msgID)
		req.Header.Set(worker.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set(worker.HeaderWebhookSignature, worker.SignWebhook(c.secret, msgID, ts, body))
	}
	var span trace.Span
	if trace.SpanContextFromContext(ctx).IsValid() {
		// the outcome record's trace context (see Hooks.handle): a span of
		// this request when tracing is on, and its context sent on
		if tracing.On() {
			ctx, span = startWebhookSpan(ctx, "delayq.hook", target,
				attribute.String("delayq.hook", hook), attribute.Int("delayq.hook.attempt", attempt),
				attribute.String("delayq.task.id", o.ID), attribute.String("delayq.task.type", o.Type),
				attribute.String("delayq.outcome", o.Outcome))
			defer span.End()
		}
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := c.client.Do(req)
	if span != nil {
		endHTTPSpan(span, resp, err)
	}
	if err != nil {
		err = config.RedactError(err) // its *url.Error holds the whole URL, query included
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("hook %s: timed out after %s: %w", target, timeout, err)
		}
		return fmt.Errorf("hook %s: %w", target, err) // connection errors: retried
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	return classify(target, resp.StatusCode, resp.Header.Get("Retry-After"), excerpt, time.Now())
}
