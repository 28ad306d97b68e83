//go:build linux

package work

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// At least once across a crash: the work process is SIGKILLed while its
// on_success call is in flight (the receiver holds the request); the work
// process started after it calls the hook again with the same
// webhook-id, and the hooks' group commits the record.
func TestHooksCalledAgainAfterCrash(t *testing.T) {
	e := newEnv(t)
	e.Kafka.CreateTopic(t, record.DefaultOutcomesTopic, 4)
	s := newSink(t)
	hs := newHookSink(t)
	var mu sync.Mutex
	var victim *proc
	hs.setRespond(func(n int, c hookCall, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			mu.Lock()
			p := victim
			mu.Unlock()
			p.kill() // before answering: the call never finished
		}
	})
	vars := e.vars(s.srv.URL + "/w")
	vars["DQ_WORK_CONFIG"] = writeHooksConfig(t, hs.srv.URL)
	mu.Lock()
	victim = startProc(t, vars)
	mu.Unlock()

	worktest.Fire(t, e.Firer, jsonTask("order-1", "order.cancel"))
	testenv.WaitFor(t, 20*time.Second, "first hook call", func() bool { return hs.count() >= 1 })
	<-victim.done
	e.WaitState(t, 10*time.Second, task.StateSucceeded, "order-1")

	startProc(t, vars)
	testenv.WaitFor(t, 30*time.Second, "hook called again after the restart", func() bool { return hs.count() >= 2 })
	n := len(worktest.ReadTopic(t, e.Kafka, record.DefaultOutcomesTopic, 1, 10*time.Second))
	testenv.WaitFor(t, 20*time.Second, "hooks group committed the outcome record", func() bool {
		return sumOffsets(committedOffsets(t, e.Kafka, e.Group+HooksGroupSuffix, record.DefaultOutcomesTopic)) >= int64(n)
	})
	calls := hs.all()
	for _, c := range calls {
		if c.path != "/ok" || c.header.Get("Dq-Id") != "order-1" || c.msgID != calls[0].msgID || c.sigErr != nil {
			t.Errorf("call %s id %s webhook-id %s (first %s), signature %v", c.path, c.header.Get("Dq-Id"), c.msgID, calls[0].msgID, c.sigErr)
		}
	}
	t.Logf("%d calls of one outcome (webhook-id %s): one in the killed process, the rest after the restart", len(calls), calls[0].msgID)
}
