// Package worker runs delayq's fired tasks: it consumes the Kafka topics the
// event processes publish to, runs a handler per task type, and reports each
// outcome back to delayq's Redis store — succeeded, retry later with backoff,
// or dead.
//
// It is the runtime of the work binary and can be embedded by programs that
// want their own Go handlers instead of webhooks:
//
//	w, err := worker.New(worker.Config{
//		Brokers: []string{"127.0.0.1:9092"},
//		Redis:   redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}),
//	})
//	w.Handle("order.cancel", func(ctx context.Context, t *worker.Task) error {
//		order, err := worker.JSON[Order](t) // the payload, typed
//		if err != nil {
//			return err // marked Permanent: dead at once, not retried
//		}
//		return cancelOrder(ctx, order) // nil: done; error: retried
//	})
//	err = w.Run(ctx) // until ctx is cancelled
//
// # Handlers
//
// Handle registers a handler per task type, HandleDefault one for every
// other type. A task whose type has neither fails as
// Config.UnhandledTypes says: [UnhandledFail] (the default) kills it at
// once with the error `no handler for task type "<type>"`;
// [UnhandledRetry] retries it with backoff until its last attempt (for a
// rolling deployment where another worker of the group knows the type).
// A handler decodes a JSON payload with [JSON] (producers encode one with
// client.JSONPayload); its error is marked [Permanent].
//
// The worker logs to Config.Logger, or slog.Default() when it is nil:
// its lifecycle at Info, and at Warn what an operator must act on (a
// consumed topic missing, Redis unreachable, dead letters not published).
//
// # Delivery
//
// Kafka delivers at least once, and a consumer-group rebalance or a crash
// redelivers records. The worker suppresses duplicates where it can:
//
//   - Each record names its task (dq-id) and generation (dq-gen). The
//     task's record in Redis is read before running: a record whose
//     generation is not the task's current one is a stale copy (the task
//     waits again since: a retry, a deferral, a reschedule or a redrive) and
//     is skipped; a task whose outcome for this generation is already stored
//     (succeeded or dead) is skipped. Copies of one generation (a leader
//     fired it again because Kafka's answer was lost) are one execution. That stored state is the
//     done-marker; it is kept for the store's retention.
//   - Two workers that receive the same record at the same time (during a
//     rebalance) do not both run it: before running, a worker claims the
//     execution. One Lua script per shard (redisstore.ClaimMany) checks
//     that the task's record has the record's generation and is firing or
//     fired, and sets its claim, field "<id>:<gen>" of the shard's claims
//     hash dq:{<ns>:<shard>}:runs (the shard's hash tag, so it works on
//     Redis Cluster), with a deadline of the task's timeout plus
//     Config.ClaimMargin, unless another run holds it; it returns the task. The other worker waits until the claim is released
//     or expires and then claims again (and finds the outcome). The claim
//     is released by the script that stores the outcome (FinishMany with
//     the claim's owner), so never before the outcome is stored. A record
//     that waited for a handler slot for more than half its claim's TTL is
//     claimed again before it runs (its claim may have expired and been
//     taken, or the task finished, by a run elsewhere).
//
// What cannot be prevented: a worker that crashes after its handler finished
// but before the outcome reached Redis leaves the task to run again, and a
// handler that ignores its context and runs past its claim may overlap with
// a second run.
//
// # Offsets
//
// Handlers run concurrently (Config.Concurrency). Per partition the worker
// commits only up to the lowest offset still running, so a record is never
// committed before its outcome is stored, and a failing task never blocks its
// partition: a failure is scheduled again in Redis (attempt+1, exponential
// backoff) and its offset committed like a success.
//
// # Rebalances
//
// kafka-go's Reader does not tell its caller when a rebalance takes a
// partition away, and commits go out under the current group generation.
// Records already handed to handlers keep running and are committed when
// they finish, possibly after the partition moved: such a late commit only
// ever covers records this worker finished, so nothing is skipped, but it
// can move the group's offset back (kafka-go#1308), and the reader may hand
// out records fetched before the rebalance (kafka-go#1398). Both only cause
// redeliveries, which the generation check, the done-marker and the
// execution claim turn into skips.
//
// # Redis
//
// The worker batches its Redis work. The fetch loop takes a micro-batch:
// whatever the Kafka reader returns within a millisecond of the first
// record, up to 256. One pipeline claims every record's execution and reads
// its task (one script call per shard); when a Limiter is set, one more
// round trip admits the batch; then the handlers run (at most
// Config.Concurrency at once). Outcomes are coalesced: one goroutine takes
// whatever outcomes are queued (up to 256) and stores them in one pipeline
// (redisstore.FinishMany, which also gives up their claims), up to two
// pipelines in flight, without waiting for more when the queue is empty.
// At most Concurrency + 512 records are held at once (fetched, outcome not
// yet stored).
//
// # Rate limits
//
// With Config.Limiter set, each claimed micro-batch is passed to
// Limiter.Admit. Tasks it defers go back to Redis due at their NotBefore
// (redisstore.Defer: not a failure, not an attempt; their claims are
// released, their offsets committed, and the event side fires them again
// with a new generation). Admitted tasks run and Limiter.Done is called
// when their handler returns. When Admit fails (Redis down), the whole
// batch is deferred a second: the worker fails closed and drops nothing.
// A Limiter that is a LimitRenewer has what an admitted task holds (a
// concurrency slot with a TTL) renewed every LimitDecision.RenewEvery
// while the task waits for a handler slot and while its handler runs, so
// a concurrency limit holds for handlers longer than the slot's TTL; a
// crashed worker stops renewing and its slots expire. A holder that
// cannot renew in time gives its slot up visibly: when no renewal is
// confirmed within LimitDecision.HoldFor less a margin (by the monotonic
// clock: a paused process, an unreachable Redis), or a renewal finds the
// slot gone, the handler's context is cancelled with [ErrLimitSlotLost]
// and the attempt counts as failed. NewLiveLimits gives
// embedded workers the live rules from etcd, as the work binary applies
// them.
//
// # Paused task types
//
// With Config.Pause set (a [PauseView]; [NewLivePause] reads delayq's pause
// state in etcd), a claimed task whose type is paused is parked before the
// Limiter sees it: redisstore.ParkMany keeps it in Redis with its due time
// and its attempt (parking is not an attempt; its claim is given up, its
// offset committed, and the event side does not fire it while parked).
// Resuming the type unparks its tasks (the daemon's resume does it at
// once): they are due at their original time, so they fire first, in
// their order. Every Config.PauseReconcile (default 10s) the worker also
// unparks every type with parked tasks that its view does not say is
// paused, which repairs a park that landed just after the type's resume
// had unparked it; it does nothing while the view is not Synced.
// delayq_work_parked_total counts parked tasks by type.
//
// # Dead letters
//
// A task that fails permanently ([Permanent]) or on its last attempt is
// marked dead in Redis first, with its last error: Redis is the record of
// truth, where an operator lists and redrives dead tasks, and the record is
// committed as soon as the dead state is stored. A copy then goes to the
// dead topic (default dq.dead) with the headers dq-error and dq-attempt, as
// a best-effort notification: written in the background from a bounded
// queue (Config.DeadLetterQueue), retried for at most
// Config.DeadLetterMaxAge, never holding back a commit or the dead listing.
// A dead topic that does not exist is counted in
// delayq_work_dead_letter_publish_errors_total{reason="unknown_topic"} and
// logged at WARN at most once a minute; dropped copies are counted in
// delayq_work_dead_letters_dropped_total. Records that are not valid delayq
// records — no or unreadable dq-* headers, an unknown task id, a payload
// over Config.MaxPayload, a task record in Redis that cannot be decoded —
// take the same way with a dq-error reason and are committed; they never
// stop the worker. (A record of an unknown task that was fired longer ago
// than Config.Retention is an old record replayed after its task's record
// expired: it is skipped, not dead-lettered.)
//
// # Outcome callback
//
// Config.OnOutcome, when set, is called with an [Outcome] for every
// execution whose outcome the worker stored: [OutcomeSucceeded],
// [OutcomeFailed] (the task waits for its next attempt; Outcome.RetryIn
// says how long) and [OutcomeDead]. It runs right after the outcome is in
// Redis, on the worker's goroutine that received Redis' answer for a
// batch of outcomes (not the handler's), so it must not block; the work
// binary hands each outcome to a bounded queue that an outcome publisher
// writes to the outcomes topic. An outcome is reported at most once: not for a
// duplicate delivery of a finished execution (skipped before its handler
// runs), and not at all when the worker crashes between storing the
// outcome and the call.
//
// # Redis errors
//
// An error of Redis — unreachable, a timeout, OOM, READONLY, LOADING, BUSY,
// NOPERM, a failed script — says nothing about a task: the claim, deferral
// or outcome is retried with backoff (counted in
// delayq_work_redis_retries_total) and its record is not committed until
// it is stored. Only a task record that cannot be decoded is poison.
//
// # Webhooks
//
// A service that receives delayq's webhooks (the work binary's handler)
// checks their Standard Webhooks signature with [VerifyWebhook]; see its
// Example.
//
// # Metrics
//
// The type label of the worker's metrics is kept for at most
// Config.MetricsMaxTypes task types (default 100); the tasks of the other
// types are counted under type="_other".
//
// # The Go runtime
//
// The work binary starts itself with GODEBUG=schedtrace=2147483647, which
// keeps Go's monitor thread out of a deep sleep that each system call then
// woke it from (8-12% of a busy work process' CPU per task; delayq's
// docs/design.md, "The Go runtime's monitor thread"), and with GOGC=400.
// A program that embeds the worker runs with its own settings: it can
// set the same in its environment.
package worker
