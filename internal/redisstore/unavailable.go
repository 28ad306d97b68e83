package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// IsUnavailable is the one predicate that decides whether an error means
// "Redis could not be reached or cannot serve right now" (so the write may
// be retried later, e.g. from the daemon's journal), as opposed to an
// answer about the data. A timed-out write counts: its outcome is unknown,
// and every write of this store is idempotent, so replaying it is safe.
//
// A server that refuses writes for a while counts too: OOM (maxmemory
// reached with noeviction), BUSY (a long script), NOREPLICAS, LOADING,
// READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN. None of them says anything
// about the task, so none may ever make a task poison or bad input; Redis
// refuses such a command before it changes anything. So do a failed login
// and a missing permission (WRONGPASS, NOAUTH, NOPERM: a setting to fix,
// after which the write is replayed), a failed TLS handshake (a
// net.Error from the dialer of config.RedisClient), and a write whose
// replicas did not confirm it in time (ErrNotReplicated: its outcome is
// unknown, and replaying it is safe for the same reason).
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNotReplicated) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	if RefusalCode(err) != "" {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "i/o timeout")
}

// RefusalCode returns the Redis error code of err when it is one of the
// "not now" refusals (transientPrefixes: OOM, READONLY, LOADING, …), or ""
// otherwise. A refusal inside a script comes back as "ERR ...
// @user_script:N: -OOM ..." (Redis 7.0) or with the code after ": ", and an
// out-of-memory refusal may carry only its text.
func RefusalCode(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if strings.Contains(msg, "command not allowed when used memory") {
		return "OOM"
	}
	for _, p := range transientPrefixes {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, ": "+p) || strings.Contains(msg, ": -"+p) {
			return p
		}
	}
	return ""
}

// transientPrefixes are the Redis error codes that mean "not now": the
// command was refused before it ran, or the cluster is moving.
var transientPrefixes = []string{
	"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED", "ASK",
	"OOM", "BUSY", "NOREPLICAS", "WRONGPASS", "NOAUTH", "NOPERM",
}

// NotRun reports whether err proves that the command it answers was not
// executed: Redis refused it before running it (RefusalCode: READONLY,
// CLUSTERDOWN, TRYAGAIN, MOVED, OOM, ...), or it was never sent (the dial
// failed, no pooled connection was free). Any other failure of a write
// (a timeout waiting for the reply, a connection reset or closed, the
// replicas' confirmation missing) leaves its outcome unknown: it may have
// run.
func NotRun(err error) bool {
	if err == nil || errors.Is(err, ErrNotReplicated) {
		return false
	}
	if RefusalCode(err) != "" || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
