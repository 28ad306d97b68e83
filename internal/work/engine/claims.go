package engine

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/redisstore"
)

// claims are the execution claims that keep two workers from running the
// same fired task at once (see the package documentation).
//
// A claim is taken by the store's claim transition (redisstore.ClaimMany:
// one Lua script per shard group checks the task's generation and state and
// sets the claim, field <id>:<gen> of the shard's claims hash
// dq:{<ns>:<shard>}:runs, unless another run holds it). The
// claim's owner is the claiming worker's instance id and a sequence
// number, so a worker only ever releases its own claim. TTL: the task's
// timeout plus a margin, so the claim of a worker that crashed expires by
// itself.
type claims struct {
	store    Store
	instance string
	seq      atomic.Uint64
	later    chan claim // releases sent in batches by releaseLoop
}

func newClaims(store Store, instance string) *claims {
	return &claims{store: store, instance: instance, later: make(chan claim, 4096)}
}

// claim is one execution claim (held or wanted): generation gen of task
// id, and the value that marks it as ours.
type claim struct {
	value string
	id    string
	gen   uint64
	// shard is the shard the record was fired from (its dq-shard header;
	// -1 when absent): claim and finish go there, also while the shard
	// map grows.
	shard int
}

// newClaim names the claim of (id, gen) for one processing of a record.
func (c *claims) newClaim(id string, gen uint64, shard int) claim {
	var buf [96]byte // one allocation (the string) for the usual instance ids
	b := append(append(buf[:0], c.instance...), ':')
	b = strconv.AppendUint(b, c.seq.Add(1), 10)
	return claim{value: string(b), id: id, gen: gen, shard: shard}
}

// of is the store's Claim for cl, lasting ttl (only ClaimMany and
// ExtendClaim read it) for the fired copy due at due (only ClaimMany
// reads it; zero: not checked). It is the one conversion to
// redisstore.Claim.
func (cl claim) of(ttl time.Duration, due time.Time) redisstore.Claim {
	return redisstore.Claim{ID: cl.id, Gen: cl.gen, TTL: ttl, Owner: cl.value, Due: due,
		Shard: cl.shard, ShardSet: cl.shard >= 0}
}

// extend sets the claim's TTL again (the task's own timeout turned out
// longer than the one the claim was taken for), only while it is ours: a
// claim that expired and was taken by another run is not touched.
func (c *claims) extend(ctx context.Context, cl claim, ttl time.Duration) error {
	_, err := c.store.ExtendClaim(ctx, cl.of(ttl, time.Time{}))
	return err
}

// release gives a claim up now. Errors are ignored: the claim expires anyway.
func (c *claims) release(ctx context.Context, cl claim) {
	_, _ = c.store.ReleaseClaim(ctx, cl.of(0, time.Time{}))
}

// releaseLater gives a claim up in the next batch of releaseLoop (the
// outcome is stored already, so nobody needs the claim gone at once: a
// waiting run re-reads the task's state anyway).
func (c *claims) releaseLater(ctx context.Context, cl claim) {
	select {
	case c.later <- cl:
	default:
		c.release(ctx, cl)
	}
}

// releaseLoop sends queued releases in pipelines until stop is closed, then
// sends what is left and returns.
func (c *claims) releaseLoop(ctx context.Context, stop <-chan struct{}) {
	batch := make([]claim, 0, 256)
	for {
		select {
		case cl := <-c.later:
			batch = append(batch[:0], cl)
		case <-stop:
			for {
				batch = batch[:0]
				for len(batch) < cap(batch) {
					select {
					case cl := <-c.later:
						batch = append(batch, cl)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				c.releaseBatch(ctx, batch)
			}
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case cl := <-c.later:
				batch = append(batch, cl)
			default:
				break more
			}
		}
		c.releaseBatch(ctx, batch)
	}
}

func (c *claims) releaseBatch(ctx context.Context, batch []claim) {
	cs := make([]redisstore.Claim, len(batch))
	for i, cl := range batch {
		cs[i] = cl.of(0, time.Time{})
	}
	// Errors are ignored: a claim not released expires with its TTL.
	_, _ = c.store.ReleaseMany(ctx, cs)
}
