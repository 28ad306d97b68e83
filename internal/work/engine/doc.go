// Package engine is the worker's runtime behind the public package
// worker: it consumes fired tasks from Kafka in micro-batches and takes
// each record through one lifecycle (lifecycle.go: parsed, claimed, held
// or skipped, admitted, deferred or parked, running, finished, ended),
// with Redis behind one seam (Store), a Limiter and a PauseView, the
// handlers on reused goroutines (runner.go), outcomes coalesced into
// pipelines (finisher.go), dead letters (deadletters.go) and offsets
// committed up to the lowest record in progress (offsets.go).
//
// The types users write code against (Task, HandlerFunc, Config, the
// Limiter's) are declared in package worker; the engine has its own
// where it needs them (Execution, LimitItem, LimitDecision: the same
// fields, converted without a copy or an allocation) and its own,
// smaller Config.
package engine
