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
// answer. A timed-out write counts: its outcome is unknown, and every write
// of this store is idempotent, so replaying it is safe.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
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
	msg := err.Error()
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, ": "+p) {
			return true
		}
	}
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "i/o timeout")
}
