// Package schedule is the contract of periodic tasks: a schedule's spec
// (cron expression, time zone, task template, catch-up policy, bounds),
// its tick computation, the ids of its ticks' tasks, and where schedules
// and the scheduler's state live in etcd.
//
// Layout (namespace ns):
//
//	/<ns>/schedules/<id>      the schedule (JSON: spec, created_at, updated_at); the daemon writes it
//	/<ns>/schedstate/<id>     the scheduler leader's state (JSON State); only the leader writes it, fenced
//	/<ns>/scheduler/leader    the election of the scheduler leader (one per namespace)
//
// A tick at time T of schedule S becomes the ordinary task with id
// "S@<T in unix ms>" due at T (TaskID): materializing a tick twice, e.g.
// across a change of leader, writes the same task, which the store
// deduplicates by id. See internal/event/scheduler for the leader's loop
// and docs/design.md ("Periodic tasks") for the exactly-once argument.
package schedule
