package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// workloadConfig shapes the open-loop workload.
type workloadConfig struct {
	Rate                 float64       // new tasks per second
	MinDelay, MaxDelay   time.Duration // due time ahead of the schedule request
	RescheduleP, CancelP float64       // share of tasks rescheduled / cancelled before due
	Prefix               string        // id prefix (unique per run)
}

// workload issues tasks at a fixed rate whatever the answers (open loop):
// each task is one goroutine that schedules it, then maybe reschedules or
// cancels it before it is due, recording every request in the history.
// Every random choice comes from the seeded generator, drawn in task
// order, so a seed replays the same tasks.
type workload struct {
	cfg     workloadConfig
	daemons []string // base URLs
	hc      *http.Client
	hist    *history
	rng     *rand.Rand

	wg     sync.WaitGroup
	issued int
}

func newWorkload(cfg workloadConfig, seed uint64, daemons []string, hist *history) *workload {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &workload{
		cfg: cfg, daemons: daemons, hist: hist,
		hc:  &http.Client{Timeout: 5 * time.Second, Transport: tr},
		rng: rand.New(rand.NewPCG(seed, 0x5eed)),
	}
}

// plan is one task's random choices.
type plan struct {
	id       string
	n        int
	delay    time.Duration
	daemon   int
	kind     opKind        // opSchedule: nothing more
	opAfter  float64       // when the follow-up goes, as a share of the delay
	newDelay time.Duration // reschedule: due time ahead of the reschedule request
	opDaemon int
}

func (w *workload) next() plan {
	r := w.rng
	p := plan{
		id:     fmt.Sprintf("%s-%06d", w.cfg.Prefix, w.issued),
		n:      w.issued,
		delay:  w.cfg.MinDelay + time.Duration(r.Int64N(int64(w.cfg.MaxDelay-w.cfg.MinDelay)+1)),
		daemon: r.IntN(len(w.daemons)),
	}
	switch x := r.Float64(); {
	case x < w.cfg.RescheduleP:
		p.kind = opReschedule
	case x < w.cfg.RescheduleP+w.cfg.CancelP:
		p.kind = opCancel
	}
	p.opAfter = 0.2 + 0.6*r.Float64()
	p.newDelay = w.cfg.MinDelay + time.Duration(r.Int64N(int64(w.cfg.MaxDelay-w.cfg.MinDelay)+1))
	p.opDaemon = r.IntN(len(w.daemons))
	w.issued++
	return p
}

// run issues tasks until ctx ends, then waits for every task's requests.
func (w *workload) run(ctx context.Context) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / w.cfg.Rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.wg.Wait()
			return
		case <-tick.C:
			p := w.next()
			w.wg.Go(func() { w.task(p) })
		}
	}
}

func (w *workload) task(p plan) {
	start := time.Now()
	due := start.Add(p.delay).UnixMilli()
	body := map[string]any{"id": p.id, "type": "chaos", "payload": map[string]int{"n": p.n}, "due_at": msTime(due)}
	i := w.hist.begin(p.id, op{kind: opSchedule, due: due, invoke: start.UnixMilli()})
	st, resp, sent, err := w.send(http.MethodPost, "/v1/tasks", body, p.daemon)
	out, detail := classify(opSchedule, st, sent, err, resp)
	w.hist.end(p.id, i, out, time.Now().UnixMilli(), st, answeredDue(resp), detail, st == http.StatusAccepted)
	if p.kind == opSchedule {
		return
	}
	at := start.Add(time.Duration(p.opAfter * float64(p.delay)))
	time.Sleep(time.Until(at)) // the follow-up's planned moment (open loop), not a wait for a condition
	now := time.Now()
	switch p.kind {
	case opReschedule:
		nd := now.Add(p.newDelay).UnixMilli()
		j := w.hist.begin(p.id, op{kind: opReschedule, due: nd, invoke: now.UnixMilli()})
		st, resp, sent, err := w.send(http.MethodPatch, "/v1/tasks/"+p.id, map[string]any{"due_at": msTime(nd)}, p.opDaemon)
		out, detail := classify(opReschedule, st, sent, err, resp)
		w.hist.end(p.id, j, out, time.Now().UnixMilli(), st, answeredDue(resp), detail, false)
	case opCancel:
		j := w.hist.begin(p.id, op{kind: opCancel, invoke: now.UnixMilli()})
		st, resp, sent, err := w.send(http.MethodDelete, "/v1/tasks/"+p.id, nil, p.opDaemon)
		out, detail := classify(opCancel, st, sent, err, resp)
		w.hist.end(p.id, j, out, time.Now().UnixMilli(), st, 0, detail, false)
	}
}

// send makes one request, to daemon first and, when that daemon does not
// accept the connection (nothing was sent), to the others. sent is false
// when no daemon accepted it.
func (w *workload) send(method, path string, body any, first int) (status int, resp []byte, sent bool, err error) {
	var payload []byte
	if body != nil {
		payload, _ = json.Marshal(body)
	}
	for k := range w.daemons {
		base := w.daemons[(first+k)%len(w.daemons)]
		req, rerr := http.NewRequest(method, base+path, bytes.NewReader(payload))
		if rerr != nil {
			return 0, nil, false, rerr
		}
		req.Header.Set("Content-Type", "application/json") // every write, body or not
		r, derr := w.hc.Do(req)
		if derr != nil {
			if notSent(derr) {
				err = derr
				continue
			}
			return 0, nil, true, derr
		}
		b, rerr := io.ReadAll(io.LimitReader(r.Body, 4096))
		r.Body.Close()
		if rerr != nil {
			return 0, nil, true, rerr // the answer was cut: unknown
		}
		return r.StatusCode, b, true, nil
	}
	return 0, nil, false, err
}

// notSent: the connection was refused, so the request never left.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// classify turns an answer into an outcome.
func classify(k opKind, status int, sent bool, err error, body []byte) (outcome, string) {
	switch {
	case !sent:
		return refused, fmt.Sprintf("no daemon reachable: %v", err)
	case err != nil:
		return unknown, err.Error()
	}
	detail := fmt.Sprintf("%d %s", status, strings.TrimSpace(string(body[:min(len(body), 160)])))
	switch {
	case k == opSchedule && (status == http.StatusCreated || status == http.StatusOK || status == http.StatusAccepted):
		return ok, detail
	case k != opSchedule && status == http.StatusOK:
		return ok, detail
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		// bad input, not found, conflict: nothing changed
		return refused, detail
	case k != opSchedule && status == http.StatusServiceUnavailable && strings.Contains(string(body), "is journaled"):
		// the id waits in this daemon's journal: refused before any store call
		return refused, detail
	}
	return unknown, detail
}

// answeredDue reads due_at from an answer (0 when absent).
func answeredDue(body []byte) int64 {
	var a struct {
		DueAt string `json:"due_at"`
	}
	if json.Unmarshal(body, &a) != nil || a.DueAt == "" {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, a.DueAt)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}

func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
