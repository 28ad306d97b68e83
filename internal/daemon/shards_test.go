package daemon

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/shardmap"
)

// A growth asked for before any event process wrote the namespace's shard
// map is a state of the namespace (409 naming it), not a server failure.
func TestGrowWithoutShardMap(t *testing.T) {
	_, e, cfg := startRedisEtcd(t)
	app := startApp(t, cfg)

	got := app.do("PUT", "/v1/shards", `{"count":8}`)
	if got.Status != 409 || got.errCode() != "conflict" || !strings.Contains(got.errMessage(), "no shard map yet") {
		t.Fatalf("PUT /v1/shards without a map: %d %s", got.Status, got.Raw)
	}
	if resp, err := e.Client(t).Get(t.Context(), shardmap.Key(cfg.Namespace)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a shard map appeared: %v %v", resp, err)
	}
}
