package testenv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/record"
)

// Collector reads topics from the start with an independent franz-go
// client, in the background until the test ends, and keeps every record,
// also by its dq-id header (records without one under "").
type Collector struct {
	mu   sync.Mutex
	recs []*kgo.Record
	byID map[string][]*kgo.Record
}

// Collect starts a Collector of topics; it stops at the test's cleanup.
func (k *Kafka) Collect(tb testing.TB, topics ...string) *Collector {
	tb.Helper()
	c := &Collector{byID: map[string][]*kgo.Record{}}
	k.Consume(tb, func(r *kgo.Record, _ time.Time) {
		id, _ := Header(r, record.HeaderID)
		c.mu.Lock()
		c.recs = append(c.recs, r)
		c.byID[id] = append(c.byID[id], r)
		c.mu.Unlock()
	}, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.FetchMaxWait(50*time.Millisecond))
	return c
}

// Consume starts a franz-go client with opts (the topics to read, where to
// start, fetch settings) and hands every record it polls to each, with the
// time PollFetches returned it, on one goroutine, until the test's cleanup
// stops it.
func (k *Kafka) Consume(tb testing.TB, each func(r *kgo.Record, at time.Time), opts ...kgo.Opt) {
	tb.Helper()
	cl := k.Client(tb, opts...)
	// Not tb.Context(): it is cancelled before the cleanups run, and the
	// client must be stopped first.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { each(r, now) })
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
}

// Distinct is the number of distinct dq-id values read so far.
func (c *Collector) Distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// Total is the number of records read so far.
func (c *Collector) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recs)
}

// Get is the records read so far whose dq-id is id, in the order read.
func (c *Collector) Get(id string) []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.byID[id])
}

// All is every record read so far, in the order read.
func (c *Collector) All() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recs)
}

// ByID is a copy of the records read so far by dq-id.
func (c *Collector) ByID() map[string][]*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]*kgo.Record, len(c.byID))
	for k, v := range c.byID {
		out[k] = slices.Clone(v)
	}
	return out
}

// Header is the value of a record's header (the first with that key).
func Header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// ParseOutcome reads a consumed outcome record with the record contract's
// parser (record.ParseOutcome), failing tb if it does not parse.
func ParseOutcome(tb testing.TB, r *kgo.Record) *record.OutcomeRecord {
	tb.Helper()
	m := kafka.Message{Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		m.Headers = append(m.Headers, kafka.Header{Key: h.Key, Value: h.Value})
	}
	o, err := record.ParseOutcome(&m)
	if err != nil {
		tb.Fatalf("outcome record %s: %v", r.Value, err)
	}
	return o
}
