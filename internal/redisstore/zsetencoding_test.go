package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
)

// zaddSkiplistMin is zadd_skiplist_min of common.lua.
const zaddSkiplistMin = 16

// TestBatchesMakeSkipLists: a batch of tasks into a small (listpack) due
// set turns it into a skip list first (zadd_all in common.lua: in a
// listpack every ZADD member scans the set), a small batch leaves it
// compact, and the pad member that converts it never stays.
func TestBatchesMakeSkipLists(t *testing.T) {
	if !strings.Contains(commonLua, "local zadd_skiplist_min = "+strconv.Itoa(zaddSkiplistMin)+"\n") {
		t.Fatalf("common.lua's zadd_skiplist_min is not %d", zaddSkiplistMin)
	}
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	s := newStore(t, rdb, Options{Shards: 1})
	ctx := t.Context()
	enc := func(key string) string {
		t.Helper()
		e, err := rdb.ObjectEncoding(ctx, key).Result()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", key, err)
		}
		return e
	}
	due := time.Now().Add(time.Hour)
	sub := func(prefix string, n int) []Submit {
		subs := make([]Submit, n)
		for i := range subs {
			subs[i] = Submit{Task: mk(fmt.Sprintf("%s-%d", prefix, i), due)}
		}
		return subs
	}
	if _, err := s.Schedule(ctx, sub("small", zaddSkiplistMin-1)); err != nil {
		t.Fatal(err)
	}
	if e := enc(s.k.due(0)); e != "listpack" {
		t.Errorf("after a batch of %d into a new due set: %s, want listpack", zaddSkiplistMin-1, e)
	}
	if _, err := s.Schedule(ctx, sub("big", zaddSkiplistMin)); err != nil {
		t.Fatal(err)
	}
	if e := enc(s.k.due(0)); e != "skiplist" {
		t.Errorf("after a batch of %d into a listpack due set: %s, want skiplist", zaddSkiplistMin, e)
	}
	members, err := rdb.ZRange(ctx, s.k.due(0), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2*zaddSkiplistMin-1 {
		t.Errorf("due set holds %d members, want %d (the pad must not stay)", len(members), 2*zaddSkiplistMin-1)
	}
	// a new due set created by a batch
	s2 := newStore(t, rdb, Options{Shards: 1})
	if _, err := s2.Schedule(ctx, sub("new", zaddSkiplistMin)); err != nil {
		t.Fatal(err)
	}
	if e := enc(s2.k.due(0)); e != "skiplist" {
		t.Errorf("after a batch of %d into a new due set: %s, want skiplist", zaddSkiplistMin, e)
	}
	if n, err := rdb.ZCard(ctx, s2.k.due(0)).Result(); err != nil || n != zaddSkiplistMin {
		t.Errorf("new due set holds %d members (%v), want %d", n, err, zaddSkiplistMin)
	}
}
