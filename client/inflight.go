package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/delayq/delayq/api"
)

// The operator's view of running work: the tasks workers hold right now
// (GET /v1/inflight), and a task's attempts (TaskInfo.Attempts).

// The wire types, declared once in package api.
type (
	// Attempt is one ended attempt of a task (TaskInfo.Attempts).
	Attempt = api.Attempt
	// InFlight is the answer of InFlight.
	InFlight = api.InFlight
	// InFlightTask is one task a worker runs now.
	InFlightTask = api.InFlightTask
)

// The outcomes of an attempt (Attempt.Outcome).
const (
	AttemptRetry     = api.AttemptRetry
	AttemptDead      = api.AttemptDead
	AttemptSucceeded = api.AttemptSucceeded
)

// InFlight lists the tasks a worker holds an execution claim of right now
// (GET /v1/inflight), soonest claim deadline first: at most limit, 1 to
// 1000 (0: the daemon's default of 100); Truncated tells that more are
// held.
func (c *Client) InFlight(ctx context.Context, limit int) (*InFlight, error) {
	path := "/v1/inflight"
	if limit != 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var r InFlight
	if err := c.do(ctx, http.MethodGet, path, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
