package engine

import (
	"context"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/work/kafkaread"
)

// fetchLoop fetches micro-batches until ctx ends and hands each to a
// goroutine that claims and dispatches it (see processBatch). A slot of
// e.sem is taken before each fetch, so at most Config.MaxHeld
// records are held at once, and no fetch starts while the held records'
// bytes reach Config.MaxHeldBytes (claimed, running or storing their outcome); at
// most Concurrency handlers run at once. The batches run under workCtx,
// which outlives ctx so that running handlers finish after a stop.
func (e *Engine) fetchLoop(ctx, workCtx context.Context, r kafkaread.Reader) error {
	f := kafkaread.Fetcher{R: r, Log: e.log, Name: "worker"}
	buf := make([]kafka.Message, 0, MaxBatch)
	order := newAdmitOrder() // admitorder.go
	for {
		for e.bytesFull() {
			select {
			case <-e.bytesFreed:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		m, ok, err := f.Next(ctx)
		if !ok {
			<-e.sem
			return err
		}
		e.holdBytes(recordBytes(&m))
		// the batch is collected in buf, reused, and copied out at its
		// size: one allocation, where growing it from a small slice
		// allocated and copied it about twice over
		buf = e.fetchMore(ctx, r, append(buf, m))
		batch := slices.Clone(buf)
		clear(buf) // keeps no record's bytes from the GC
		buf = buf[:0]
		for i := range batch {
			e.offs.start(batch[i].Topic, batch[i].Partition, batch[i].Offset)
		}
		e.met.running.Add(float64(len(batch)))
		turn := e.nextTurn(order, batch)
		e.running.Go(func() { e.processBatch(workCtx, batch, turn) })
	}
}

// fetchMore adds to batch what the reader returns within BatchWindow, up to
// MaxBatch records and as long as the hold limits allow (a batch ends when
// the held bytes reach Config.MaxHeldBytes). A fetch error
// ends the batch; the next blocking fetch reports it.
func (e *Engine) fetchMore(ctx context.Context, r kafkaread.Reader, batch []kafka.Message) []kafka.Message {
	fctx, cancel := context.WithTimeout(ctx, BatchWindow)
	defer cancel()
	for len(batch) < MaxBatch && !e.bytesFull() {
		select {
		case e.sem <- struct{}{}:
		case <-fctx.Done():
			return batch
		}
		m, err := r.FetchMessage(fctx)
		if err != nil {
			<-e.sem
			return batch
		}
		e.holdBytes(recordBytes(&m))
		batch = append(batch, m)
	}
	return batch
}

func (e *Engine) commitLoop(ctx context.Context, r kafkaread.Reader) {
	kafkaread.CommitEvery(ctx, e.cfg.CommitInterval, e.log, "worker", func(ctx context.Context) error { return e.commitNow(ctx, r) })
}

// commitNow commits every partition whose commit point moved.
func (e *Engine) commitNow(ctx context.Context, r kafkaread.Reader) error {
	cs := e.offs.pending()
	if len(cs) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(cs))
	for i, c := range cs {
		// CommitMessages commits a message's offset + 1.
		msgs[i] = kafka.Message{Topic: c.topic, Partition: c.partition, Offset: c.offset - 1}
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		e.met.commits.WithLabelValues("error").Inc()
		return err
	}
	e.met.commits.WithLabelValues("ok").Inc()
	e.offs.markCommitted(cs)
	return nil
}

// statsLoop copies the reader's figures into metrics. kafka-go's Stats
// resets its counters on every call; only this loop calls it.
func (e *Engine) statsLoop(ctx context.Context, r kafkaread.Reader) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s := r.Stats()
			e.met.consumerLag.Set(float64(max(s.Lag, 0)))
			e.met.rebalances.Add(float64(s.Rebalances))
		}
	}
}

// recordBytes is what a held record counts against Config.MaxHeldBytes.
func recordBytes(m *kafka.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// holdBytes counts n bytes of a fetched record as held.
func (e *Engine) holdBytes(n int64) {
	e.met.heldBytes.Add(float64(n))
	e.heldBytes.Add(n)
}

// releaseBytes gives n held bytes back and wakes a fetch loop waiting for
// the held bytes to fall below the bound.
func (e *Engine) releaseBytes(n int64) {
	e.met.heldBytes.Sub(float64(n))
	if e.heldBytes.Add(-n) < e.cfg.MaxHeldBytes {
		select {
		case e.bytesFreed <- struct{}{}:
		default:
		}
	}
}

// bytesFull reports whether the held bytes reached Config.MaxHeldBytes.
func (e *Engine) bytesFull() bool { return e.heldBytes.Load() >= e.cfg.MaxHeldBytes }
