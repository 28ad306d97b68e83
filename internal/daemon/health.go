package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
)

// Readiness, Redis' condition, and internal errors.
//
// The daemon can accept a schedule when Redis takes writes or the journal
// does, so /readyz is 503 only when neither can; its body has one line per
// dependency either way ("redis: degraded: ..." while the journal takes
// the writes). Redis can be reachable and still refuse writes (OOM when
// maxmemory is reached with noeviction, READONLY, ...): the daemon then
// journals schedules like during an outage and replays them once a write
// succeeds; delayq_redis_write_refusals_total{reason} counts the refusals
// and delayq_redis_writable is 0 meanwhile. On a Redis Cluster these
// are per shard (shardhealth.go): a master that is down or refuses writes
// marks its shards down, /readyz names them ("redis: degraded: 5 of 16
// shards down") and the other shards take writes as usual.
//
// No answer carries Redis' own error text (it can hold script SHAs and
// Lua line numbers): Redis problems are described by redisCondition, and
// an unexpected error answers 500 internal with a request id that the
// log line with the detail carries.

// refusal is a write Redis refused although it answered.
type refusal struct {
	what  string // redisCondition of the error
	since time.Time
}

// redisCodes maps the Redis error codes that mean "not now"
// (redisstore.RefusalCode) to the reason label and the operator's
// description.
var redisCodes = map[string]struct{ reason, what string }{
	"OOM":         {"oom", "refusing writes: out of memory (maxmemory reached)"},
	"READONLY":    {"readonly", "refusing writes: a read-only replica"},
	"NOREPLICAS":  {"noreplicas", "refusing writes: not enough replicas"},
	"MASTERDOWN":  {"masterdown", "refusing writes: its master is down"},
	"LOADING":     {"loading", "loading its data set"},
	"BUSY":        {"busy", "busy running a script"},
	"CLUSTERDOWN": {"cluster", "cluster down"},
	"TRYAGAIN":    {"cluster", "cluster resharding"},
	"MOVED":       {"cluster", "cluster resharding"},
	"ASK":         {"cluster", "cluster resharding"},
	"WRONGPASS":   {"auth", "refusing the login: wrong user name or password (DQ_REDIS_USERNAME, DQ_REDIS_PASSWORD)"},
	"NOAUTH":      {"auth", "asking for a login (DQ_REDIS_USERNAME, DQ_REDIS_PASSWORD)"},
	"NOPERM":      {"noperm", "refusing a command or key to the ACL user (grant it the rules dq acl prints)"},
}

// classifyRedis returns the reason label and description of a Redis
// error, without its text.
func classifyRedis(err error) (reason, what string) {
	if c, ok := redisCodes[redisstore.RefusalCode(err)]; ok {
		return c.reason, c.what
	}
	if errors.Is(err, redisstore.ErrNotReplicated) {
		return "replicas", "applying writes its replicas did not confirm in time (DQ_REDIS_REPLICA_ACKS)"
	}
	var ce *config.ConnError
	switch {
	case errors.As(err, &ce) && config.Misconfigured(err):
		// the handshake's own words and the node: no Redis content
		return "tls", ce.Error()
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout"):
		return "timeout", "timed out"
	case redisstore.IsUnavailable(err):
		return "unreachable", "unreachable"
	}
	return "error", "answered with an unexpected error"
}

// redisCondition describes a Redis error for an answer or a log line.
func redisCondition(err error) string {
	_, what := classifyRedis(err)
	return what
}

// redisAnswered reports whether err is Redis' own answer (an error reply,
// or a WAIT that counted too few replicas), as opposed to no answer.
func redisAnswered(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, redisstore.ErrNotReplicated)
}

// formatShards lists shard numbers, the first 16 of them.
func formatShards(shards []int) string {
	var b strings.Builder
	for i, sh := range shards {
		if i == 16 {
			fmt.Fprintf(&b, ", ... %d more", len(shards)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(sh))
	}
	return b.String()
}

// noteMisconfig records whether a Redis error says that delayq's settings
// are wrong (a TLS handshake or a login refused, a permission missing):
// that does not heal by waiting, so /readyz says not ready until an
// operation succeeds again.
func (co *core) noteMisconfig(err error) {
	if err == nil {
		if old := co.misconfig.Swap(nil); old != nil {
			co.log.Info("redis accepts delayq's settings again")
		}
		return
	}
	if !config.Misconfigured(err) {
		return
	}
	what := redisCondition(err)
	if old := co.misconfig.Swap(&what); old == nil || *old != what {
		co.log.Error("redis refuses delayq's settings; schedules are journaled until they are fixed", "reason", what, "error", err)
	}
}

// noteWrite records the outcome of a write (a schedule or a replay): a
// refusal while Redis answers makes it not writable until a write
// succeeds.
func (co *core) noteWrite(err error) {
	switch {
	case err == nil:
		if old := co.refused.Swap(nil); old != nil {
			co.log.Info("redis accepts writes again", "refused_since", old.since)
			co.wake()
		}
	case redisstore.IsUnavailable(err) && redisAnswered(err):
		reason, what := classifyRedis(err)
		co.m.refusals.WithLabelValues(reason).Inc()
		if co.refused.Load() == nil {
			co.refused.Store(&refusal{what: what, since: co.now()})
			co.log.Warn("redis refuses writes; schedules go to the journal until it accepts them", "reason", what, "error", err)
		}
	}
}

// redisWritable reports whether Redis takes writes as far as the daemon
// knows.
func (co *core) redisWritable() bool {
	return co.store.Load() != nil && co.redisUp.Load() && co.refused.Load() == nil && len(co.shardsDown()) == 0
}

// report is /readyz.
func (co *core) report(ctx context.Context) (bool, []admin.Check) {
	rc := admin.Check{Name: "redis", OK: true, Detail: "ok"}
	switch r := co.refused.Load(); {
	case co.misconfig.Load() != nil:
		rc.OK, rc.Detail = false, "misconfigured: "+*co.misconfig.Load()+"; schedules are journaled until the setting is fixed"
	case co.store.Load() == nil && r != nil:
		rc.OK, rc.Detail = false, fmt.Sprintf("degraded: store not open: %s since %s; schedules are journaled", r.what, wire.FormatTime(r.since))
	case co.store.Load() == nil:
		rc.OK, rc.Detail = false, "degraded: not reachable since the daemon started; schedules are journaled"
	case !co.redisUp.Load():
		rc.OK, rc.Detail = false, "degraded: unreachable; schedules are journaled"
	case r != nil:
		rc.OK, rc.Detail = false, fmt.Sprintf("degraded: %s since %s; schedules are journaled and replayed once it accepts writes", r.what, wire.FormatTime(r.since))
	default:
		if down := co.shardsDown(); len(down) > 0 {
			rc.OK, rc.Detail = false, fmt.Sprintf("degraded: %d of %d shards down (%s); their schedules are journaled and replayed once they answer",
				len(down), co.store.Load().Shards(), formatShards(down))
		}
	}
	// The journal check writes new data (journal.Check: a full disk fails
	// it), at most once per few seconds whatever the poll rate, and a
	// journal write that failed fails it at once.
	jc := admin.Check{Name: "journal", OK: true}
	if err := co.jr.Check(ctx); err != nil {
		jc.OK, jc.Detail = false, "failing: cannot write ("+err.Error()+")"
		if msg := err.Error(); co.jrFailing.Load() == nil || *co.jrFailing.Load() != msg {
			co.jrFailing.Store(&msg)
			co.log.Warn("journal write check failed", "error", err)
		}
	} else {
		jc.Detail = fmt.Sprintf("ok (%d entries waiting for replay)", co.jr.Len())
		if co.jrFailing.Swap(nil) != nil {
			co.log.Info("journal takes writes again")
		}
	}
	if !rc.OK && !jc.OK {
		return false, []admin.Check{rc, jc, {Name: "schedules", Detail: "refused: neither redis nor the journal takes writes"}}
	}
	if co.misconfig.Load() != nil {
		return false, []admin.Check{rc, jc}
	}
	return true, []admin.Check{rc, jc}
}

// internalError logs an unexpected failure with a fresh request id and
// returns the 500 answer, which carries the id but not the detail.
func (co *core) internalError(op string, err error, attrs ...any) *wire.Error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	co.log.Error("internal error", append([]any{"request_id", id, "op", op, "error", err}, attrs...)...)
	return wire.Internal(fmt.Sprintf("internal error in %s (request_id %s; the daemon's log has the detail)", op, id))
}
