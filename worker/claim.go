package worker

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// claims are the execution claims that keep two workers from running the
// same fired task at once (see the package documentation).
//
// Key: dq:{<ns>:<shard>}:run:<id>:<gen>, in the task's shard hash tag, so a
// claim lives in the same Redis Cluster slot as the task's record. Value:
// the claiming worker's instance id and a sequence number, so a worker only
// ever releases its own claim. TTL: the task's timeout plus a margin, so the
// claim of a worker that crashed expires by itself.
//
// A Lua transition inside the store ("fired -> running" with the same
// generation check as Finish) would be cleaner: one script, no separate key.
type claims struct {
	rdb      redis.UniversalClient
	ns       string
	instance string
	seq      atomic.Uint64
	later    chan claim // releases sent in batches by releaseLoop
}

func newClaims(rdb redis.UniversalClient, ns, instance string) *claims {
	return &claims{rdb: rdb, ns: ns, instance: instance, later: make(chan claim, 4096)}
}

// releaseScript deletes a claim only if it is still ours.
// KEYS[1] claim key; ARGV[1] our value. Returns 1 when deleted.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

func (c *claims) key(shard int, id string, gen uint64) string {
	return "dq:{" + c.ns + ":" + strconv.Itoa(shard) + "}:run:" + id + ":" + strconv.FormatUint(gen, 10)
}

// claim is one execution claim (held or wanted): its key and the value
// that marks it as ours.
type claim struct {
	key, value string
}

// newClaim names the claim of (id, gen) for one processing of a record.
func (c *claims) newClaim(shard int, id string, gen uint64) claim {
	return claim{key: c.key(shard, id, gen), value: c.instance + ":" + strconv.FormatUint(c.seq.Add(1), 10)}
}

// try sends SET NX PX for cl. With an asynchronous client the command is
// only queued: its result is read from the returned command, and commands
// sent after it on the same client run after it in Redis.
func (c *claims) try(ctx context.Context, cl claim, ttl time.Duration) *redis.BoolCmd {
	return c.rdb.SetNX(ctx, cl.key, cl.value, ttl)
}

// mine reports whether cl is held with our value (after a try whose
// outcome was unknown).
func (c *claims) mine(ctx context.Context, cl claim) (bool, error) {
	v, err := c.rdb.Get(ctx, cl.key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == cl.value, err
}

// extend sets the claim's TTL again (the task's own timeout turned out
// longer than the one the claim was taken for).
func (c *claims) extend(ctx context.Context, cl claim, ttl time.Duration) error {
	return c.rdb.PExpire(ctx, cl.key, ttl).Err()
}

// release gives a claim up now. Errors are ignored: the claim expires anyway.
func (c *claims) release(ctx context.Context, cl claim) {
	_ = releaseScript.Run(ctx, c.rdb, []string{cl.key}, cl.value).Err()
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
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cl := range batch {
			releaseScript.EvalSha(ctx, p, []string{cl.key}, cl.value)
		}
		return nil
	})
	if err == nil {
		return
	}
	// NOSCRIPT after a Redis restart (or a failed pipeline): one by one,
	// which loads the script again.
	for i, cmd := range cmds {
		if cmd.Err() != nil && i < len(batch) {
			c.release(ctx, batch[i])
		}
	}
}
