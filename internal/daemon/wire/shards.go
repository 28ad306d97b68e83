package wire

import (
	"fmt"
	"net/http"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/shardmap"
)

// CodeInvalidShardCount is the 422 answer of PUT /v1/shards for a count
// the map cannot grow to (not more than the current count, over
// shardmap.MaxShards, or not a multiple of the current count).
const CodeInvalidShardCount = "invalid_shard_count"

// InvalidShardCount is the 422 invalid_shard_count answer.
func InvalidShardCount(msg string) *Error {
	return &Error{http.StatusUnprocessableEntity, CodeInvalidShardCount, msg}
}

// Shards is the body of GET /v1/shards and of PUT's 202: the wire type
// the Go client reads (api.ShardMap).
type Shards = api.ShardMap

// DecodeGrow decodes PUT /v1/shards' body {"count": N}. A count out of
// 1..shardmap.MaxShards is 422 invalid_shard_count; whether it may follow
// the current count is for the caller (it depends on the map).
func DecodeGrow(b []byte) (int, *Error) {
	if e := scanOne(b); e != nil {
		return 0, e
	}
	r := &reader{b: b, i: skipWS(b, 0)}
	if r.b[r.i] != '{' {
		return 0, notObject(r, "request")
	}
	count, seen := 0, false
	e := r.object(func(key []byte) *Error {
		if string(key) != "count" {
			return unknownField(key)
		}
		if seen {
			return duplicateField(key)
		}
		seen = true
		n, e := r.integer("count")
		if e != nil {
			return InvalidShardCount(e.Message)
		}
		count = n
		return nil
	})
	if e != nil {
		return 0, e
	}
	if !seen {
		return 0, InvalidShardCount("count: required")
	}
	if count < 1 || count > shardmap.MaxShards {
		return 0, InvalidShardCount(fmt.Sprintf("count: %d is out of 1..%d", count, shardmap.MaxShards))
	}
	return count, nil
}
