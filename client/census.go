package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/delayq/delayq/api"
)

// The census: the tasks per type and state, the coming load, the recent
// history, and the search by id prefix. The answers are the daemon's wire
// types, declared once in package api (the search's task items are
// ListedTask, as ListTasks answers them).
type (
	Counts       = api.Counts
	CountFigures = api.CountFigures
	TypeCount    = api.TypeCount
	Load         = api.Load
	LoadBucket   = api.LoadBucket
	TypeLoad     = api.TypeLoad
	History      = api.History
	HistoryPoint = api.HistoryPoint
	Gauge        = api.Gauge
)

// Counts reads the tasks per type and state (GET /v1/counts): a capped
// scan of the shards' sets, cached by the daemon for a few seconds.
// Counts.Sampled says when a set held more members than the daemon scans
// (the per-type figures are then lower bounds).
func (c *Client) Counts(ctx context.Context) (*Counts, error) {
	var v Counts
	if err := c.do(ctx, http.MethodGet, "/v1/counts", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// LoadOptions selects what Load reads.
type LoadOptions struct {
	Horizon time.Duration // how far ahead, up to 168h; 0: the daemon's default of 1h
	Step    time.Duration // a bucket's width, at least 1s, at most 288 in Horizon; 0: 5m
	Type    string        // only this type's per-type figures; empty: every type
}

// Load reads the waiting tasks due in each step of the coming horizon
// (GET /v1/load), paused tasks not counted. A bad option is an *APIError
// with a 4xx status whose message names it.
func (c *Client) Load(ctx context.Context, o LoadOptions) (*Load, error) {
	q := url.Values{}
	if o.Horizon != 0 {
		q.Set("horizon", o.Horizon.String())
	}
	if o.Step != 0 {
		q.Set("step", o.Step.String())
	}
	if o.Type != "" {
		q.Set("type", o.Type)
	}
	var v Load
	if err := c.do(ctx, http.MethodGet, "/v1/load"+encodeQuery(q), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// History reads the tasks that succeeded and died in each step of the
// last window (up to 24h; 0: the daemon's default of 1h), step at least
// 1s (0: 1m), and the daemon's gauge samples over the window (GET
// /v1/history).
func (c *Client) History(ctx context.Context, window, step time.Duration) (*History, error) {
	q := url.Values{}
	if window != 0 {
		q.Set("window", window.String())
	}
	if step != 0 {
		q.Set("step", step.String())
	}
	var v History
	if err := c.do(ctx, http.MethodGet, "/v1/history"+encodeQuery(q), nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// SearchPage is one page of a search by id prefix.
type SearchPage struct {
	Tasks []ListedTask `json:"tasks"` // in id order
	// Cursor continues the scan (SearchTasks' cursor); empty when it is
	// complete.
	Cursor  string `json:"cursor"`
	Scanned int64  `json:"scanned"` // records the daemon examined for this page
}

// SearchTasks reads one page of the tasks whose id starts with prefix (1
// to 200 bytes, matched literally), in any state (GET /v1/search). limit
// is the page size, 1 to 1000 (0: the daemon's default of 100); cursor is
// "" to start, else the Cursor of the previous page. A page may hold
// fewer tasks than limit, even none, and still have a Cursor: the daemon
// bounds the work of each request.
func (c *Client) SearchTasks(ctx context.Context, prefix string, limit int, cursor string) (*SearchPage, error) {
	q := url.Values{"prefix": {prefix}}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var p SearchPage
	if err := c.do(ctx, http.MethodGet, "/v1/search"+encodeQuery(q), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Search walks every task whose id starts with prefix, page by page. It
// stops at the first error, which it yields. A task that stays put is
// seen once.
func (c *Client) Search(ctx context.Context, prefix string) iter.Seq2[ListedTask, error] {
	return walkPages("search", "", func(cursor string) ([]ListedTask, string, error) {
		p, err := c.SearchTasks(ctx, prefix, 0, cursor)
		if err != nil {
			return nil, "", err
		}
		return p.Tasks, p.Cursor, nil
	})
}

func encodeQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}
