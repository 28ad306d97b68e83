package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/work/kafkaread"
)

// abandonGrace bounds how long Run waits for handlers after cancelling their
// contexts at the shutdown deadline.
const abandonGrace = 5 * time.Second

// run is the consumer: fetch, dispatch to at most Concurrency handlers,
// commit finished offsets.
//
// Shutdown order, once ctx ends:
//  1. stop fetching;
//  2. wait for running handlers up to ShutdownTimeout, then cancel their
//     contexts (records not finished stay uncommitted: they run again on
//     another worker) and wait up to abandonGrace more;
//  3. commit what finished (meanwhile the queued dead letters are written
//     for at most deadDrain);
//  4. close the reader (leaves the group), then, after the dead letters,
//     the dead-letter writer.
//
// Redis is the caller's client; the caller closes it after Run returns.
func (w *Worker) run(ctx context.Context, r kafkaread.Reader, dw messageWriter) error {
	workCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	bgCtx, stopBG := context.WithCancel(workCtx)
	var bg sync.WaitGroup
	bg.Go(func() { w.commitLoop(bgCtx, r) })
	bg.Go(func() { w.statsLoop(bgCtx, r) })
	if w.cfg.Pause != nil {
		bg.Go(func() { w.reconcileLoop(ctx) }) // stops with fetching
	}
	stopReleases := make(chan struct{})
	var releases sync.WaitGroup
	releases.Go(func() { w.claims.releaseLoop(context.WithoutCancel(ctx), stopReleases) })
	stopFinisher := make(chan struct{})
	var fin sync.WaitGroup
	fin.Go(func() { w.finisher.run(context.WithoutCancel(ctx), stopFinisher) })
	stopDead := make(chan struct{})
	var dead sync.WaitGroup
	dead.Go(func() { w.deadq.run(context.WithoutCancel(ctx), stopDead, deadDrain) })

	var handlers, runners sync.WaitGroup
	w.running = &handlers
	w.runners = &runners
	w.stopRunners = make(chan struct{})
	w.sem = make(chan struct{}, w.cfg.MaxHeld)
	w.bytesFreed = make(chan struct{}, 1)
	w.fetching.Store(true)
	fetchErr := w.fetchLoop(ctx, workCtx, r)
	w.fetching.Store(false)

	// 2. wait for running handlers
	w.log.Info("worker stopping: waiting for running handlers", "running", w.offs.running(), "timeout", w.cfg.ShutdownTimeout)
	ended := kafkaread.Drain(&handlers, w.cfg.ShutdownTimeout)
	if !ended {
		w.log.Warn("shutdown timeout: cancelling running handlers; their records stay uncommitted", "running", w.offs.running())
		abandon()
		if ended = kafkaread.Drain(&handlers, abandonGrace); !ended {
			w.log.Error("handlers did not return after cancellation", "running", w.offs.running())
		}
	}
	close(w.stopRunners)
	if ended {
		runners.Wait() // idle, about to return: a handler that never returns keeps its runner
	}
	stopBG()
	bg.Wait()
	close(stopFinisher)
	fin.Wait()
	close(stopReleases)
	releases.Wait()
	// dead letters queued by the handlers: written within deadDrain, or
	// dropped (their dead state is in Redis); meanwhile, and never waiting
	// for them:
	close(stopDead)

	// 3. commit what finished
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := w.commitNow(cctx, r); err != nil {
		w.log.Warn("final commit failed; finished records may be delivered again", "err", err)
	}
	cancel()

	// 4. close
	if err := r.Close(); err != nil {
		w.log.Warn("close kafka reader", "err", err)
	}
	dead.Wait()
	if err := dw.Close(); err != nil {
		w.log.Warn("close kafka writer", "err", err)
	}
	w.log.Info("worker stopped")
	return fetchErr
}

// fetchLoop fetches micro-batches until ctx ends and hands each to a
// goroutine that claims and dispatches it (see processBatch). A slot of
// w.sem is taken before each fetch, so at most Config.MaxHeld
// records are held at once, and no fetch starts while the held records'
// bytes reach Config.MaxHeldBytes (claimed, running or storing their outcome); at
// most Concurrency handlers run at once. The batches run under workCtx,
// which outlives ctx so that running handlers finish after a stop.
func (w *Worker) fetchLoop(ctx, workCtx context.Context, r kafkaread.Reader) error {
	f := kafkaread.Fetcher{R: r, Log: w.log, Name: "worker"}
	buf := make([]kafka.Message, 0, maxBatch)
	for {
		for w.bytesFull() {
			select {
			case <-w.bytesFreed:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		m, ok, err := f.Next(ctx)
		if !ok {
			<-w.sem
			return err
		}
		w.holdBytes(recordBytes(&m))
		// the batch is collected in buf, reused, and copied out at its
		// size: one allocation, where growing it from a small slice
		// allocated and copied it about twice over
		buf = w.fetchMore(ctx, r, append(buf, m))
		batch := slices.Clone(buf)
		clear(buf) // keeps no record's bytes from the GC
		buf = buf[:0]
		for i := range batch {
			w.offs.start(batch[i].Topic, batch[i].Partition, batch[i].Offset)
		}
		w.met.running.Add(float64(len(batch)))
		w.running.Go(func() { w.processBatch(workCtx, batch) })
	}
}

// fetchMore adds to batch what the reader returns within batchWindow, up to
// maxBatch records and as long as the hold limits allow (a batch ends when
// the held bytes reach Config.MaxHeldBytes). A fetch error
// ends the batch; the next blocking fetch reports it.
func (w *Worker) fetchMore(ctx context.Context, r kafkaread.Reader, batch []kafka.Message) []kafka.Message {
	fctx, cancel := context.WithTimeout(ctx, batchWindow)
	defer cancel()
	for len(batch) < maxBatch && !w.bytesFull() {
		select {
		case w.sem <- struct{}{}:
		case <-fctx.Done():
			return batch
		}
		m, err := r.FetchMessage(fctx)
		if err != nil {
			<-w.sem
			return batch
		}
		w.holdBytes(recordBytes(&m))
		batch = append(batch, m)
	}
	return batch
}

func (w *Worker) commitLoop(ctx context.Context, r kafkaread.Reader) {
	kafkaread.CommitEvery(ctx, w.cfg.CommitInterval, w.log, "worker", func(ctx context.Context) error { return w.commitNow(ctx, r) })
}

// commitNow commits every partition whose commit point moved.
func (w *Worker) commitNow(ctx context.Context, r kafkaread.Reader) error {
	cs := w.offs.pending()
	if len(cs) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(cs))
	for i, c := range cs {
		// CommitMessages commits a message's offset + 1.
		msgs[i] = kafka.Message{Topic: c.topic, Partition: c.partition, Offset: c.offset - 1}
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		w.met.commits.WithLabelValues("error").Inc()
		return err
	}
	w.met.commits.WithLabelValues("ok").Inc()
	w.offs.markCommitted(cs)
	return nil
}

// statsLoop copies the reader's figures into metrics. kafka-go's Stats
// resets its counters on every call; only this loop calls it.
func (w *Worker) statsLoop(ctx context.Context, r kafkaread.Reader) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s := r.Stats()
			w.met.consumerLag.Set(float64(max(s.Lag, 0)))
			w.met.rebalances.Add(float64(s.Rebalances))
		}
	}
}
