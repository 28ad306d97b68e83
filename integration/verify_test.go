package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/client"
)

// delivery is one webhook request the work binary made.
type delivery struct {
	ID      string
	Type    string
	Attempt int
	Gen     string
	DueAt   time.Time // Dq-Due-At
	At      time.Time // when the request arrived
	Body    []byte
	Status  int  // what the receiver answered
	Done    bool // the receiver answered 2xx after running to completion
	// Worker is the index of the work process that sent it: each one's
	// DQ_WEBHOOK_URL ends in /hook/<i> (see workerHook).
	Worker string
}

// workerHook is the webhook URL of work process i, given the receiver's
// base URL: the receiver tells the workers' requests apart by it.
func workerHook(base string, i int) string {
	return base + "/hook/" + strconv.Itoa(i)
}

// behaviour decides how the receiver treats a delivery: the status to
// answer and how long to work first. nil: 200 at once.
type behaviour func(d delivery) (status int, work time.Duration)

// recorder is the webhook receiver of a scenario: it records every
// delivery (including those whose connection dropped) and answers per
// behaviour.
type recorder struct {
	behave behaviour

	mu      sync.Mutex
	all     []delivery
	live    map[int]delivery // in flight, by arrival number
	seq     int
	changed chan struct{}
}

func newRecorder(b behaviour) *recorder {
	return &recorder{behave: b, live: map[int]delivery{}, changed: make(chan struct{})}
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	d := delivery{
		ID:   req.Header.Get("Dq-Id"),
		Type: req.Header.Get("Dq-Type"),
		Gen:  req.Header.Get("Dq-Gen"),
		At:   time.Now(),
	}
	if w, ok := strings.CutPrefix(req.URL.Path, "/hook/"); ok {
		d.Worker = w
	}
	d.Attempt, _ = strconv.Atoi(req.Header.Get("Dq-Attempt"))
	if ms, err := strconv.ParseInt(req.Header.Get("Dq-Due-At"), 10, 64); err == nil {
		d.DueAt = time.UnixMilli(ms)
	}
	d.Body, _ = io.ReadAll(req.Body)
	status, work := http.StatusOK, time.Duration(0)
	if r.behave != nil {
		status, work = r.behave(d)
	}
	r.mu.Lock()
	r.seq++
	n := r.seq
	r.live[n] = d
	r.notify()
	r.mu.Unlock()
	completed := true
	if work > 0 {
		select {
		case <-time.After(work): // the handler's simulated work
		case <-req.Context().Done():
			completed = false // the worker went away (crash, timeout)
		}
	}
	d.Status = status
	d.Done = completed && status/100 == 2
	r.mu.Lock()
	delete(r.live, n)
	r.all = append(r.all, d)
	r.notify()
	r.mu.Unlock()
	if completed {
		w.WriteHeader(status)
	}
}

// notify wakes waiters; r.mu is held.
func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// snapshot returns the recorded deliveries and the number in flight.
func (r *recorder) snapshot() ([]delivery, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all), len(r.live)
}

// inflightFrom returns the deliveries of work process worker that are in
// flight now.
func (r *recorder) inflightFrom(worker string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.live {
		if d.Worker == worker {
			out = append(out, d)
		}
	}
	return out
}

// done returns, per id, the deliveries answered 2xx to completion.
func (r *recorder) done() map[string][]delivery {
	all, _ := r.snapshot()
	out := map[string][]delivery{}
	for _, d := range all {
		if d.Done {
			out[d.ID] = append(out[d.ID], d)
		}
	}
	return out
}

// waitDone waits until every id has a completed delivery.
func (r *recorder) waitDone(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("all %d tasks delivered to the webhook", len(ids)), func() (bool, string) {
		done := r.done()
		var missing []string
		for _, id := range ids {
			if len(done[id]) == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d missing, e.g. %v", len(missing), missing[:min(5, len(missing))])
	})
}

// kafkaLog reads a topic from its start for the whole test, with an
// independent client (franz-go), and keeps every record by dq-id.
type kafkaLog struct {
	mu   sync.Mutex
	byID map[string][]*kgo.Record
	n    int
}

func watchKafka(t *testing.T, c Cluster, topic string) *kafkaLog {
	t.Helper()
	cl, err := kgo.NewClient(append(c.KafkaOpts(),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		t.Fatalf("kafka client for %v: %v", c.Brokers(), err)
	}
	k := &kafkaLog{byID: map[string][]*kgo.Record{}}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(rec *kgo.Record) {
				id := header(rec, "dq-id")
				k.mu.Lock()
				k.byID[id] = append(k.byID[id], rec)
				k.n++
				k.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		cl.Close()
	})
	return k
}

func (k *kafkaLog) records(id string) []*kgo.Record {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.byID[id])
}

// waitRecords waits until every id has at least one record.
func (k *kafkaLog) waitRecords(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("records of all %d tasks in Kafka", len(ids)), func() (bool, string) {
		k.mu.Lock()
		defer k.mu.Unlock()
		missing := 0
		for _, id := range ids {
			if len(k.byID[id]) == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d missing", missing)
	})
}

func header(rec *kgo.Record, name string) string {
	for _, h := range rec.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func headerMillis(rec *kgo.Record, name string) (time.Time, bool) {
	ms, err := strconv.ParseInt(header(rec, name), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// waitState waits until GET shows every id in state.
func waitState(t *testing.T, cl *client.Client, ids []string, state string, timeout time.Duration) {
	t.Helper()
	pending := slices.Clone(ids)
	waitFor(t, timeout, fmt.Sprintf("all %d tasks %s", len(ids), state), func() (bool, string) {
		var still []string
		why := ""
		for _, id := range pending {
			ti, err := cl.Get(t.Context(), id)
			switch {
			case err != nil:
				still, why = append(still, id), err.Error()
			case ti.State != state:
				still, why = append(still, id), id+" is "+ti.State
			}
		}
		pending = still
		return len(pending) == 0, fmt.Sprintf("%d not yet (%s)", len(pending), why)
	})
}

// lagStats summarizes fired-at minus due-at over records.
func lagStats(recs []*kgo.Record) string {
	var lags []time.Duration
	for _, r := range recs {
		due, ok1 := headerMillis(r, "dq-due-at")
		fired, ok2 := headerMillis(r, "dq-fired-at")
		if ok1 && ok2 {
			lags = append(lags, fired.Sub(due))
		}
	}
	if len(lags) == 0 {
		return "no records"
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	q := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	return fmt.Sprintf("firing lag (dq-fired-at − dq-due-at, ms resolution) over %d records: p50 %v, p99 %v, max %v",
		len(lags), q(0.50), q(0.99), lags[len(lags)-1])
}

// shardsLed reads delayq_shards_led of every event instance (-1 when
// unreadable).
func shardsLed(hc *http.Client, c Cluster, events int) []int {
	out := make([]int, events)
	for i := range events {
		v, ok := metric(hc, c.AdminURL(Event, i), "delayq_shards_led")
		out[i] = int(v)
		if !ok {
			out[i] = -1
		}
	}
	return out
}

// waitBalanced waits until the live event instances (alive) together lead
// every shard, each at least one.
func waitBalanced(t *testing.T, hc *http.Client, c Cluster, events int, alive []int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("event instances %v share all %d shards", alive, c.Shards()), func() (bool, string) {
		led := shardsLed(hc, c, events)
		sum := 0
		for _, i := range alive {
			if led[i] < 1 {
				return false, fmt.Sprintf("shards led per instance %v", led)
			}
			sum += led[i]
		}
		return sum == c.Shards(), fmt.Sprintf("shards led per instance %v", led)
	})
}
