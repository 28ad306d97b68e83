// Package scheduler provides the schedule scheduler of the event processes:
// one of them, elected through etcd, materializes the ticks of every
// schedule (package schedule) as ordinary tasks a lookahead ahead of time.
//
// A tick's task has the id "<schedule id>@<tick in unix ms>", so a tick
// materialized twice (by two leaders around a failover, or by one leader
// that retries a pass) is deduplicated by the store. The leader records
// what it handled in a State per schedule, written in an etcd transaction
// fenced by its election key, and only after the pass's tasks are in
// Redis: a leader that lost its lease cannot move the states, and its
// successor starts from the last state a leader wrote. Ticks a successor
// finds in the past (an outage longer than the lookahead) follow the
// schedule's catch-up policy; the ones a dead leader materialized without
// recording them are found by their id.
//
// A change of a schedule cancels its materialized ticks that the new spec
// does not produce (all of them on pause or delete). The pass that sees a
// change writes the ticks with redisstore.Submit.Revive, so a tick an
// earlier change cancelled fires when the schedule produces it again (a
// resume, or a change undone, within the lookahead). A tick whose task a
// user cancelled stays cancelled and is counted as skipped.
package scheduler
