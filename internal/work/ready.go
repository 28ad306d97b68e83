package work

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/admin"
)

// Readiness: a work process is ready when its worker consumes (Redis
// answers, the consumed topics exist and the group reader runs) and the
// topic check finds every consumed topic. The dead topic is not part of
// it: the dead set in Redis is the record of a dead task (GET /v1/dead),
// the dead topic a notification. A missing dead topic is reported on a
// line of /readyz's body (which still answers 200), by
// delayq_work_dead_topic_missing and by a WARN log, while dead letters
// are retried and then dropped (counted; worker.Config.DeadLetterMaxAge,
// 10 minutes in the work binary).

// topicsHint is what an operator does about a missing topic.
const topicsHint = "create them or set DQ_KAFKA_AUTO_CREATE=true"

// report is /readyz's report: the worker, the consumed topics and the
// dead topic, one line each; only the first two decide readiness.
func (a *App) report(ctx context.Context) (bool, []admin.Check) {
	werr := a.worker.Ready(ctx)
	wc := admin.Check{Name: "worker", OK: werr == nil, Detail: "consuming"}
	if werr != nil {
		wc.Detail = werr.Error()
	}
	missing, terr := a.topics.Missing()
	if terr != nil {
		kc := admin.Check{Name: "kafka topics", Detail: "kafka: " + terr.Error()}
		return false, []admin.Check{wc, kc}
	}
	consumed := slices.DeleteFunc(slices.Clone(missing), func(t string) bool { return !slices.Contains(a.cfg.Topics, t) })
	kc := admin.Check{Name: "kafka topics", OK: len(consumed) == 0, Detail: "present: " + strings.Join(a.cfg.Topics, ", ")}
	if !kc.OK {
		kc.Detail = "missing: " + strings.Join(consumed, ", ") + " (" + topicsHint + ")"
	}
	dc := admin.Check{Name: "kafka dead topic " + a.cfg.DeadTopic, OK: !a.deadTopicMissing(), Detail: "present"}
	if !dc.OK {
		dc.Detail = deadMissingDetail
	}
	return wc.OK && kc.OK, []admin.Check{wc, kc, dc}
}

// deadMissingDetail is the dead topic's line of /readyz while it is
// missing.
const deadMissingDetail = "missing, not needed to be ready: dead tasks stay in Redis (GET /v1/dead); " +
	"their dead letters are not published (retried for 10 minutes, then dropped and counted); create it or set DQ_KAFKA_AUTO_CREATE=true"

// readyErr is report as an error (nil: ready), for the process registry.
func (a *App) readyErr(ctx context.Context) error {
	ready, checks := a.report(ctx)
	if ready {
		return nil
	}
	var failing []string
	for _, c := range checks {
		if !c.OK {
			failing = append(failing, c.Line())
		}
	}
	return errors.New(strings.Join(failing, "; "))
}

// deadTopicMissing reports whether the last topic check found the dead
// topic missing (false while no check answered: not known missing). A
// dead topic that is also consumed counts as consumed.
func (a *App) deadTopicMissing() bool {
	if slices.Contains(a.cfg.Topics, a.cfg.DeadTopic) {
		return false
	}
	missing, err := a.topics.Missing()
	return err == nil && slices.Contains(missing, a.cfg.DeadTopic)
}

// registerDeadTopic registers delayq_work_dead_topic_missing.
func (a *App) registerDeadTopic(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: admin.Namespace, Name: "work_dead_topic_missing",
		Help: "1 while the last Kafka topic check found the dead topic (DQ_DEAD_TOPIC) missing: dead letters are not published " +
			"(dead tasks stay in Redis); it does not make the process unready.",
	}, func() float64 {
		if a.deadTopicMissing() {
			return 1
		}
		return 0
	}))
}

// deadTopicPoll is how often watchDeadTopic reads the topic check's last
// answer (in memory; the check itself asks Kafka every few seconds).
const deadTopicPoll = time.Second

// watchDeadTopic logs a WARN when the dead topic is found missing, and
// an INFO when it is back, until ctx ends.
func (a *App) watchDeadTopic(ctx context.Context) {
	t := time.NewTicker(deadTopicPoll)
	defer t.Stop()
	was := false
	for {
		if now := a.deadTopicMissing(); now != was {
			if now {
				a.log.Warn("kafka dead topic missing: the process stays ready and dead tasks stay in Redis (GET /v1/dead), "+
					"but their dead letters are not published; "+topicsHint, "topic", a.cfg.DeadTopic)
			} else {
				a.log.Info("kafka dead topic present", "topic", a.cfg.DeadTopic)
			}
			was = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
