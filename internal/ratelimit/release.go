package ratelimit

import (
	"context"
	"slices"
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
// slot when no Admit comes first: one command per slot set, with every
// slot queued for it. Another process sees the slot free at most
// releaseDelay (plus a round trip) later than before. A release that
// fails goes back to the queue; a slot whose release never reaches Redis
// still expires after its TTL, as a crashed holder's does.
const releaseDelay = 2 * time.Millisecond

// relKind is the kind of slot set a release is for.
type relKind uint8

const (
	relType  relKind = iota // a type's :run: ZREM of the slot ids
	relKeyed                // a keyed rule's :ks: releasekeyed.lua with the slot ids
	relOne                  // a keyed rule's :k1: (value, claim, fresh until) triples (oneArgs)
)

// A release of a limit-1 keyed slot (:k1, whose member is the value) is
// sent as a plain ZREM while it is fresh — sent within half the slot's TTL
// of the request that set its holder's claim (admission or renewal), so
// the slot cannot have expired and been taken by another task — and
// otherwise through releaseone.lua, which frees it only while the claim
// is the holder's. A fresh ZREM costs Redis about a quarter of the script
// (BenchmarkAdmitKeyed). A release that failed and goes back to the queue
// is never fresh again.

// monoEpoch is the origin of mono.
var monoEpoch = time.Now()

// mono is this process' monotonic clock, in ns.
func mono() int64 { return int64(time.Since(monoEpoch)) }

// relEntry is a queued release: the slot (in :k1, the value) and, for a
// limit-1 keyed slot, its holder's claim and until when (mono) it is fresh.
type relEntry struct {
	slot         string
	claim, fresh int64
}

// releases is a Limiter's queue of slots to free.
type releases struct {
	mu      sync.Mutex
	pending map[string][]relEntry // slot set key -> its queued releases
	kinds   map[string]relKind    // the kind of each key of pending
	armed   bool                  // a flush is scheduled
	// sending is held by Flush from taking the queue until Redis
	// answered, and by an Admit while it takes the queue: an Admit after
	// a Done waits for a flush in flight that carries that Done's slot,
	// instead of racing it (its script would find the slot still held)
	sending sync.Mutex
}

// relQueue is a taken queue: the releases per key and the keys' kinds.
type relQueue struct {
	args  map[string][]relEntry
	kinds map[string]relKind
}

// add queues the release of a slot of the set key; it reports whether
// the caller must schedule a flush.
func (r *releases) add(key string, kind relKind, e relEntry) (arm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.put(key, kind, e)
	arm, r.armed = !r.armed, true
	return arm
}

// put appends to the queue; r.mu is held.
func (r *releases) put(key string, kind relKind, es ...relEntry) {
	if r.pending == nil {
		r.pending, r.kinds = make(map[string][]relEntry), make(map[string]relKind)
	}
	r.pending[key] = append(r.pending[key], es...)
	r.kinds[key] = kind
}

// has reports whether slot of the set key (in :k1, with that claim: a
// value's later holder is not its earlier one) waits to be freed, after
// any flush in flight (which may carry it) reached Redis.
func (r *releases) has(key, slot string, claim int64) bool {
	r.sending.Lock()
	defer r.sending.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.pending[key] {
		if e.slot == slot && e.claim == claim {
			return true
		}
	}
	return false
}

// take empties the queue.
func (r *releases) take() relQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := relQueue{args: r.pending, kinds: r.kinds}
	r.pending, r.kinds, r.armed = nil, nil, false
	return q
}

// putBack queues again the releases of q whose command failed; none is
// fresh any more (it may arrive after its slot expired).
func (r *releases) putBack(q relQueue, cmds map[string][]redis.Cmder) (arm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, es := range q.args {
		if failed(cmds[key]) {
			for i := range es {
				es[i].fresh = 0
			}
			r.put(key, q.kinds[key], es...)
		}
	}
	if len(r.pending) > 0 && !r.armed {
		arm, r.armed = true, true
	}
	return arm
}

// failed reports whether any of a key's release commands failed (its
// slots are then all sent again: freeing a slot twice changes nothing).
func failed(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Err() != nil {
			return true
		}
	}
	return false
}

// takeForAdmit is take for an Admit: after any flush in flight.
func (r *releases) takeForAdmit() relQueue {
	r.sending.Lock()
	defer r.sending.Unlock()
	return r.take()
}

// releaseChunk is the most arguments one release script call takes (Lua's
// unpack has a limit).
const releaseChunk = 1000

// queue adds the releases of q to pipe: a ZREM per type's slot set, a
// release script call (releaseChunk arguments at most) per keyed rule's.
func (q relQueue) queue(ctx context.Context, pipe redis.Pipeliner) map[string][]redis.Cmder {
	if len(q.args) == 0 {
		return nil
	}
	cmds := make(map[string][]redis.Cmder, len(q.args))
	zrem := func(key string, members []any) {
		cmd := redis.NewIntCmd(ctx, append([]any{"zrem", key}, members...)...)
		_ = pipe.Process(ctx, cmd)
		cmds[key] = append(cmds[key], cmd)
	}
	run := func(s *redis.Script, key string, args []any) {
		cmds[key] = append(cmds[key], s.EvalSha(ctx, pipe, []string{key}, args...))
	}
	for key, es := range q.args {
		switch q.kinds[key] {
		case relType:
			zrem(key, slots(es))
		case relKeyed:
			args := slots(es)
			for from := 0; from < len(args); from += releaseChunk {
				run(releaseKeyedScript, key, args[from:min(from+releaseChunk, len(args))])
			}
		case relOne:
			fresh, vals, claims := oneArgs(es, mono())
			if len(fresh) > 0 {
				zrem(key, fresh)
			}
			for from := 0; from < len(vals); from += releaseChunk / 2 {
				to := min(from+releaseChunk/2, len(vals))
				run(releaseOneScript, key, append(slices.Clone(vals[from:to]), claims[from:to]...))
			}
		}
	}
	return cmds
}

// oneArgs splits the releases of a :k1 key into the values fresh at now
// (for a ZREM) and the values and claims of the others (for
// releaseone.lua).
func oneArgs(es []relEntry, now int64) (fresh, vals, claims []any) {
	for _, e := range es {
		if now < e.fresh {
			fresh = append(fresh, e.slot)
			continue
		}
		vals, claims = append(vals, e.slot), append(claims, e.claim)
	}
	return fresh, vals, claims
}

// slots returns the slot ids of es, for a command's arguments.
func slots(es []relEntry) []any {
	out := make([]any, len(es))
	for i, e := range es {
		out[i] = e.slot
	}
	return out
}

// hasKeyed reports whether q holds a keyed rule's release.
func (q relQueue) hasKeyed() bool {
	for _, k := range q.kinds {
		if k != relType {
			return true
		}
	}
	return false
}

// release queues the release of a slot and schedules a flush when none is.
func (l *Limiter) release(key string, kind relKind, e relEntry) {
	if l.rel.add(key, kind, e) {
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
	q := l.rel.take()
	if len(q.args) == 0 {
		return nil
	}
	l.loadReleaseScripts(ctx, q)
	pipe := l.rdb.Pipeline()
	cmds := q.queue(ctx, pipe)
	_, err := pipe.Exec(ctx)
	l.settleReleases(q, cmds)
	return err
}

// loadReleaseScripts loads the keyed release scripts before their calls go
// out in a pipeline (where EVALSHA cannot fall back to EVAL) unless they
// are known loaded: once per Limiter, and again after a release met
// NOSCRIPT (a Redis restarted or failed over). Without it the release
// would fail and go out again later, and the admission sent with it would
// find the slot still held.
func (l *Limiter) loadReleaseScripts(ctx context.Context, q relQueue) {
	if l.relLoaded.Load() || !q.hasKeyed() {
		return
	}
	if releaseKeyedScript.Load(ctx, l.rdb).Err() == nil && releaseOneScript.Load(ctx, l.rdb).Err() == nil {
		l.relLoaded.Store(true)
	}
}

// settleReleases puts back the releases whose command failed (after a
// keyed one met NOSCRIPT the scripts are loaded before the next flush).
func (l *Limiter) settleReleases(q relQueue, cmds map[string][]redis.Cmder) {
	if len(q.args) == 0 {
		return
	}
	for _, cs := range cmds {
		for _, cmd := range cs {
			if isNoScript(cmd.Err()) {
				l.relLoaded.Store(false)
			}
		}
	}
	if l.rel.putBack(q, cmds) {
		time.AfterFunc(releaseDelay, l.flushReleases)
	}
}
