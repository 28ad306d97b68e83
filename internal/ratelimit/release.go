package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Releases. Done used to free a concurrency slot with a ZREM of its own:
// one Redis round trip per handled task, which cost a worker as much as
// the rest of its work on the task together (BenchmarkKeyLimits: a
// concurrency rule, per type or per key, ran at 22% of the rate without
// one, with 20-40 µs more CPU per task in the worker and in Redis). Done
// now queues the slot; the queue goes out with the next Admit, in its
// pipeline and before its scripts (an Admit of this Limiter after a Done
// always finds the slot free), or releaseDelay after the first queued
// slot when no Admit comes first: one ZREM per running set, with every
// slot queued for it. Another process sees the slot free at most
// releaseDelay (plus a round trip) later than before. A release that
// fails goes back to the queue; a slot whose release never reaches Redis
// still expires after its TTL, as a crashed holder's does.
const releaseDelay = 2 * time.Millisecond

// releases is a Limiter's queue of slots to free.
type releases struct {
	mu      sync.Mutex
	pending map[string][]any // running set key -> slot ids
	armed   bool             // a flush is scheduled
	// sending is held by Flush from taking the queue until Redis
	// answered, and by an Admit while it takes the queue: an Admit after
	// a Done waits for a flush in flight that carries that Done's slot,
	// instead of racing it (its script would find the slot still held)
	sending sync.Mutex
}

// add queues slot of the running set key; it reports whether the caller
// must schedule a flush.
func (r *releases) add(key, slot string) (arm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = make(map[string][]any)
	}
	r.pending[key] = append(r.pending[key], slot)
	arm, r.armed = !r.armed, true
	return arm
}

// has reports whether slot of the running set key waits to be freed,
// after any flush in flight (which may carry it) reached Redis.
func (r *releases) has(key, slot string) bool {
	r.sending.Lock()
	defer r.sending.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.pending[key] {
		if s == slot {
			return true
		}
	}
	return false
}

// take empties the queue.
func (r *releases) take() map[string][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending, r.armed = nil, false
	return p
}

// putBack queues again the releases of p whose command failed.
func (r *releases) putBack(p map[string][]any, cmds map[string]*redis.IntCmd) (arm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, slots := range p {
		if cmds[key] == nil || cmds[key].Err() == nil {
			continue
		}
		if r.pending == nil {
			r.pending = make(map[string][]any)
		}
		r.pending[key] = append(r.pending[key], slots...)
	}
	if len(r.pending) > 0 && !r.armed {
		arm, r.armed = true, true
	}
	return arm
}

// takeForAdmit is take for an Admit: after any flush in flight.
func (r *releases) takeForAdmit() map[string][]any {
	r.sending.Lock()
	defer r.sending.Unlock()
	return r.take()
}

// queueReleases adds the ZREMs of p to pipe.
func queueReleases(ctx context.Context, pipe redis.Pipeliner, p map[string][]any) map[string]*redis.IntCmd {
	if len(p) == 0 {
		return nil
	}
	cmds := make(map[string]*redis.IntCmd, len(p))
	for key, slots := range p {
		args := make([]any, 0, 2+len(slots))
		args = append(args, "zrem", key)
		args = append(args, slots...)
		cmd := redis.NewIntCmd(ctx, args...)
		_ = pipe.Process(ctx, cmd)
		cmds[key] = cmd
	}
	return cmds
}

// release queues a slot and schedules a flush when none is.
func (l *Limiter) release(key, slot string) {
	if l.rel.add(key, slot) {
		time.AfterFunc(releaseDelay, l.flushReleases)
	}
}

// flushReleases sends the queued releases now (the timer's flush).
func (l *Limiter) flushReleases() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.Flush(ctx)
}

// Flush sends the queued releases of Done now; the error is the first
// failed one's (those go back to the queue and are sent again).
func (l *Limiter) Flush(ctx context.Context) error {
	l.rel.sending.Lock()
	defer l.rel.sending.Unlock()
	p := l.rel.take()
	if len(p) == 0 {
		return nil
	}
	pipe := l.rdb.Pipeline()
	cmds := queueReleases(ctx, pipe, p)
	_, err := pipe.Exec(ctx)
	l.settleReleases(p, cmds)
	return err
}

// settleReleases puts back the releases whose command failed.
func (l *Limiter) settleReleases(p map[string][]any, cmds map[string]*redis.IntCmd) {
	if len(p) > 0 && l.rel.putBack(p, cmds) {
		time.AfterFunc(releaseDelay, l.flushReleases)
	}
}
