package redisstore

import (
	"context"
	"fmt"
	"strconv"
)

// minListpackValue is the hash-max-listpack-value at which a record with a
// small payload stays in a bucket's compact encoding.
const minListpackValue = 256

// MemoryAdvice returns a warning when Redis' hash encoding settings make
// task records cost more memory than they need to (see docs/design.md
// "Memory"), or "" when they are fine or cannot be read (CONFIG disabled, as
// on some managed services).
func (s *Store) MemoryAdvice(ctx context.Context) string {
	for _, name := range []string{"hash-max-listpack-value", "hash-max-ziplist-value"} {
		m, err := s.rdb.ConfigGet(ctx, name).Result()
		if err != nil || m[name] == "" {
			continue
		}
		v, err := strconv.Atoi(m[name])
		if err != nil || v >= minListpackValue {
			return ""
		}
		return fmt.Sprintf("redis %s is %d: task records use about 20%% more memory than with 512 (set hash-max-listpack-value 512 and hash-max-listpack-entries 256)", name, v)
	}
	return ""
}
