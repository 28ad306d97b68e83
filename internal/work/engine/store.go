package engine

import (
	"context"

	"github.com/delayq/delayq/internal/redisstore"
)

// Store is the engine's one seam to Redis: the transitions of
// *redisstore.Store it calls (its Lua scripts: claim.lua, finish.lua,
// park.lua, ...). Run takes one; tests may put a fake in its place.
type Store interface {
	// ClaimMany claims the executions of a micro-batch and reads their
	// tasks (the claimed step); per-record errors are in the results.
	ClaimMany(ctx context.Context, cs []redisstore.Claim) ([]redisstore.ClaimResult, error)
	// ExtendClaim, ReleaseClaim and ReleaseMany act on a claim only while
	// its owner holds it.
	ExtendClaim(ctx context.Context, c redisstore.Claim) (bool, error)
	ReleaseClaim(ctx context.Context, c redisstore.Claim) (bool, error)
	ReleaseMany(ctx context.Context, cs []redisstore.Claim) (int, error)
	// FinishMany stores outcomes and deferrals, each giving its claim
	// up; per-record errors are in the results.
	FinishMany(ctx context.Context, fs []redisstore.Finish) ([]redisstore.FinishResult, error)
	// ParkMany parks claimed tasks of a paused type; Unpark and
	// ParkedTypes serve the pause reconciler.
	ParkMany(ctx context.Context, ps []redisstore.Park) (int, error)
	Unpark(ctx context.Context, typ string) (int, error)
	ParkedTypes(ctx context.Context) (map[string]int64, error)
}

var _ Store = (*redisstore.Store)(nil)
