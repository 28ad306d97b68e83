package work

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/record"
)

// TestHooksSkipDelivered: a "delivered" outcome (a task fired to a topic
// no work process handles) calls neither on_success nor on_failure, of
// its type's entry or of "*", whether the consumer decides from the
// headers or from the value; it is skipped quietly (not counted as
// skipped or refused) and committed.
func TestHooksSkipDelivered(t *testing.T) {
	e := newHookEnv(t)
	s := newHookSink(t)
	reg := prometheus.NewRegistry()
	h := e.newTestHooks(t, map[string]OutcomeHooks{
		"crm.sync": {OnSuccess: s.srv.URL + "/ok", OnFailure: s.srv.URL + "/failed", Timeout: 5 * time.Second, MaxAge: time.Hour},
		"*":        {OnSuccess: s.srv.URL + "/any-ok", OnFailure: s.srv.URL + "/any-failed", Timeout: 5 * time.Second, MaxAge: time.Hour},
	}, reg)
	runHooks(t, h)

	delivered := newOutcome("bridge-1", "crm.sync", record.OutcomeDelivered)
	delivered.FiredAt, delivered.Partition, delivered.Offset = delivered.DueAt.Add(5*time.Millisecond), 0, 0
	other := newOutcome("bridge-2", "other.type", record.OutcomeDelivered)
	e.publish(t, delivered, other)
	// the same outcome with the marker only: the consumer reads the value
	bare := record.EncodeOutcome(newOutcome("bridge-3", "crm.sync", record.OutcomeDelivered), e.topic)
	bare.Headers = []kafka.Header{{Key: record.HeaderOutcome, Value: []byte(record.OutcomeDelivered)}}
	if err := e.w.WriteMessages(t.Context(), bare); err != nil {
		t.Fatal(err)
	}
	ok := newOutcome("sync-4", "crm.sync", record.OutcomeSucceeded)
	e.publish(t, ok)
	e.waitCommitted(t, 4)

	calls := s.all()
	if len(calls) != 1 || calls[0].path != "/ok" || calls[0].header.Get("Dq-Id") != ok.ID {
		t.Fatalf("calls %+v, want only /ok for %s", calls, ok.ID)
	}
	for _, reason := range []string{"invalid", "stale"} {
		if v := metric(t, reg, "delayq_hook_records_skipped_total", "reason", reason); v != 0 {
			t.Errorf("skipped %s = %v, want 0", reason, v)
		}
	}
	for _, reason := range []string{record.ForgedUnmarked, record.ForgedTaskRecord} {
		if v := metric(t, reg, "delayq_hook_records_refused_total", "reason", reason); v != 0 {
			t.Errorf("refused %s = %v, want 0", reason, v)
		}
	}
}
