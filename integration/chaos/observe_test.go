package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/testenv"
)

// Topics the suite reads.
const (
	tasksTopic = "dq.tasks"
	deadTopic  = "dq.dead"
)

// record is one Kafka record the event processes wrote, with the dq-*
// headers the checkers use.
type record struct {
	topic     string
	partition int32
	offset    int64
	id        string
	shard     int // -1 when absent
	token     int64
	firedAt   int64 // dq-fired-at, ms (Redis' clock, as the event process computed it)
	dueAt     int64 // dq-due-at, ms
	gen       uint64
	observed  int64 // when the test's live consumer saw it (test clock, ms); 0: not seen live
	err       string
}

type recKey struct {
	topic     string
	partition int32
	offset    int64
}

func parseRecord(r *kgo.Record) record {
	rec := record{topic: r.Topic, partition: r.Partition, offset: r.Offset, shard: -1}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case "dq-id":
			rec.id = v
		case "dq-shard":
			if n, err := strconv.Atoi(v); err == nil {
				rec.shard = n
			}
		case "dq-token":
			rec.token, _ = strconv.ParseInt(v, 10, 64)
		case "dq-fired-at":
			rec.firedAt, _ = strconv.ParseInt(v, 10, 64)
		case "dq-due-at":
			rec.dueAt, _ = strconv.ParseInt(v, 10, 64)
		case "dq-gen":
			rec.gen, _ = strconv.ParseUint(v, 10, 64)
		case "dq-error":
			rec.err = v
		}
	}
	return rec
}

// observer reads both topics from their start for the whole run with its
// own franz-go client and notes when it first saw each record (the test's
// clock): a record seen before its due time was fired early whatever its
// headers say.
type observer struct {
	mu   sync.Mutex
	seen map[recKey]int64
	byID map[string]int
}

func startObserver(t testing.TB, k *testenv.Kafka) *observer {
	o := &observer{seen: map[recKey]int64{}, byID: map[string]int{}}
	cl := k.Client(t,
		kgo.ConsumeTopics(tasksTopic, deadTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now().UnixMilli()
			o.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				key := recKey{r.Topic, r.Partition, r.Offset}
				if _, dup := o.seen[key]; dup {
					return
				}
				o.seen[key] = now
				if r.Topic == tasksTopic {
					o.byID[parseRecord(r).id]++
				}
			})
			o.mu.Unlock()
		}
	})
	t.Cleanup(func() { cancel(); waitCleanup(t, "the observer's consumer", &wg) })
	return o
}

// fired reports whether the observer saw a record of id.
func (o *observer) fired(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byID[id] > 0
}

// readAll reads both topics whole with a fresh franz-go client, up to the
// high watermarks kfake reports, and adds what the observer saw live.
func readAll(t testing.TB, k *testenv.Kafka, o *observer) []record {
	t.Helper()
	want := map[string]map[int32]int64{}
	total := int64(0)
	for _, topic := range []string{tasksTopic, deadTopic} {
		want[topic] = map[int32]int64{}
		for _, p := range k.Cluster.PartitionInfos(topic) {
			want[topic][p.Partition] = p.HighWatermark
			total += p.HighWatermark - p.LogStartOffset
		}
	}
	cl := k.Client(t,
		kgo.ConsumeTopics(tasksTopic, deadTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out []record
	got := map[string]map[int32]int64{tasksTopic: {}, deadTopic: {}}
	done := func() bool {
		for topic, ps := range want {
			for p, hwm := range ps {
				if hwm > 0 && got[topic][p] < hwm {
					return false
				}
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("chaos: reading the topics back: %d of %d records after 60s", len(out), total)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("chaos: fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 > got[r.Topic][r.Partition] {
				got[r.Topic][r.Partition] = r.Offset + 1
			}
			out = append(out, parseRecord(r))
		})
	}
	o.mu.Lock()
	for i := range out {
		out[i].observed = o.seen[recKey{out[i].topic, out[i].partition, out[i].offset}]
	}
	o.mu.Unlock()
	return out
}

// sink is the webhook the work processes deliver to: it answers 200 and
// notes when each task arrived (the test's clock).
type sink struct {
	mu      sync.Mutex
	handled map[string][]int64
	total   int
}

func newSink() *sink { return &sink{handled: map[string][]int64{}} }

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now().UnixMilli()
	id := r.Header.Get("Dq-Id")
	s.mu.Lock()
	s.handled[id] = append(s.handled[id], now)
	s.total++
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *sink) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.handled[id]) > 0
}

func (s *sink) snapshot() map[string][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]int64, len(s.handled))
	for id, v := range s.handled {
		out[id] = append([]int64(nil), v...)
	}
	return out
}

func (r record) String() string {
	return fmt.Sprintf("%s/%d@%d id=%s shard=%d token=%d gen=%d fired_at=%s due_at=%s",
		r.topic, r.partition, r.offset, r.id, r.shard, r.token, r.gen, msClock(r.firedAt), msClock(r.dueAt))
}

// msClock formats unix ms as a wall-clock time for reports.
func msClock(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("15:04:05.000")
}

// groupWatch notes every change of the work processes' consumer group
// (state, generation, members, assigned partitions) as kfake sees it, for
// the timeline printed with the summary: a work tier that stops consuming
// shows up there.
type groupWatch struct {
	mu    sync.Mutex
	lines []string
}

func watchGroup(t *testing.T, k *testenv.Kafka, group string, start time.Time) *groupWatch {
	g := &groupWatch{}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		last := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s := "absent"
			if gi := k.Cluster.GroupInfo(group); gi != nil {
				s = fmt.Sprintf("%s generation %d, %d members, %d partitions assigned", gi.State, gi.Epoch, len(gi.Members), gi.NumAssigned())
			}
			if s != last {
				last = s
				g.mu.Lock()
				g.lines = append(g.lines, fmt.Sprintf("%7.2fs group  %s", time.Since(start).Seconds(), s))
				g.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() { cancel(); waitCleanup(t, "the consumer-group watch", &wg) })
	return g
}

func (g *groupWatch) timeline() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.lines...)
}
