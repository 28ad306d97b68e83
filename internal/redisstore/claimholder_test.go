package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/task"
)

// ClaimHolder reads the execution claim of generation gen of task id (the
// tests look at a claim directly): the owner that holds it and the time
// left until it expires, by Redis' clock; "" when nobody holds it (never
// claimed, released, or expired).
func (s *Store) ClaimHolder(ctx context.Context, id string, gen uint64) (owner string, left time.Duration, err error) {
	var now *redis.TimeCmd
	var val *redis.StringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		key := s.k.runs(s.Shard(id))
		now, val = p.Time(ctx), p.HGet(ctx, key, claimField(id, gen))
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("claim of %s gen %d: %w", id, gen, err)
	}
	dl, who, ok := strings.Cut(val.Val(), "|")
	ms, perr := strconv.ParseInt(dl, 10, 64)
	if !ok || perr != nil {
		return "", 0, fmt.Errorf("claim of %s gen %d: unreadable value %q", id, gen, val.Val())
	}
	left = task.FromMillis(ms).Sub(now.Val())
	if left <= 0 {
		return "", 0, nil
	}
	return who, left, nil
}
