package client

import (
	"context"
	"net/http"

	"github.com/delayq/delayq/api"
)

// Shard map states (ShardMap.State).
const (
	ShardsStable    = api.ShardsStable
	ShardsMigrating = api.ShardsMigrating
)

// ShardMap is the namespace's shard count and the state of its growth, as
// GET /v1/shards and PUT /v1/shards answer it: the daemon's wire type,
// declared once in package api.
type ShardMap = api.ShardMap

// Shards reads the namespace's shard map (GET /v1/shards).
func (c *Client) Shards(ctx context.Context) (*ShardMap, error) {
	var m ShardMap
	if err := c.do(ctx, http.MethodGet, "/v1/shards", nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// GrowShards starts growing the namespace to count shards (PUT
// /v1/shards) and returns the map the daemon answered with, normally
// migrating; poll Shards until it is stable again. The daemon refuses,
// with an *APIError: a migration already running (409, errors.Is
// ErrConflict); a count not above the current one, above 4096 or not a
// multiple of the current count (422, code "invalid_shard_count"); and,
// with 503 "unavailable", a daemon without a reachable etcd.
func (c *Client) GrowShards(ctx context.Context, count int) (*ShardMap, error) {
	var m ShardMap
	if err := c.do(ctx, http.MethodPut, "/v1/shards", api.GrowShards{Count: count}, &m); err != nil {
		return nil, err
	}
	return &m, nil
}
