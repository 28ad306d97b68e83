// Package etcdlease is the etcd session of a leader: a lease granted here,
// wrapped in a concurrency.Session, and the time of etcd's last
// keep-alive answer, so that a leader only starts work while etcd has
// confirmed the lease within TTL − margin (RELIABILITY rule 3). The shard
// leadership (internal/event/leader) and the scheduler
// (internal/event/scheduler) each run on one.
package etcdlease

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/delayq/delayq/internal/retry"
)

// Session is a concurrency.Session plus the time of its last keep-alive
// answer.
type Session struct {
	*concurrency.Session
	cli         *clientv3.Client
	base        time.Time // monotonic base of answer
	ttl, margin time.Duration
	answer      atomic.Int64 // since base
	kaDone      chan struct{}
}

// New grants a lease of ttl (whole seconds, at least one), wraps it in a
// concurrency.Session and follows its keep-alive answers. margin is taken
// off every answer's time for its way back.
func New(ctx context.Context, cli *clientv3.Client, ttl, margin time.Duration) (*Session, error) {
	sec := max(int64(ttl/time.Second), 1)
	gctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	g, err := cli.Grant(gctx, sec)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	cs, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(sec)))
	if err != nil {
		Revoke(ctx, cli, g.ID)
		return nil, fmt.Errorf("session: %w", err)
	}
	s := &Session{Session: cs, cli: cli, base: time.Now(), ttl: ttl, margin: margin, kaDone: make(chan struct{})}
	// The server started the lease before its answer arrived; the margin
	// covers the answer's way back (as for every keep-alive answer).
	s.answered(time.Now())
	ka, err := cli.KeepAlive(cs.Ctx(), g.ID)
	if err != nil {
		_ = cs.Close()
		return nil, fmt.Errorf("keep-alive: %w", err)
	}
	go func() {
		defer close(s.kaDone)
		for range ka {
			s.answered(time.Now())
		}
	}()
	return s, nil
}

// answered records a keep-alive answer received at at; answers only move
// forward.
func (s *Session) answered(at time.Time) {
	d := int64(at.Sub(s.base))
	for {
		old := s.answer.Load()
		if d <= old || s.answer.CompareAndSwap(old, d) {
			return
		}
	}
}

// ValidUntil is the earliest time the lease may have expired on the
// server: the last answer plus the TTL, less the margin.
func (s *Session) ValidUntil() time.Time {
	return s.base.Add(time.Duration(s.answer.Load()) + s.ttl - s.margin)
}

// Confirmed waits, at most d, until a keep-alive answer vouches for the
// lease (ValidUntil ahead of now). It reports false when none came in
// time or ctx ended.
func (s *Session) Confirmed(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Until(s.ValidUntil()) <= 0 {
		if time.Now().After(deadline) || !retry.Sleep(ctx, 20*time.Millisecond) {
			return false
		}
	}
	return true
}

// KeepAliveDone is closed when the keep-alive stream ended.
func (s *Session) KeepAliveDone() <-chan struct{} { return s.kaDone }

// Stop revokes the lease (bounded to a second, even after ctx ended),
// closes the session and waits for the keep-alive follower.
func (s *Session) Stop(ctx context.Context) {
	Revoke(ctx, s.cli, s.Lease())
	_ = s.Close() // ends the session's context (Revoke again, harmless)
	<-s.kaDone
}

// Revoke revokes lease id, bounded to a second even after ctx ended.
func Revoke(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = cli.Revoke(rctx, id)
}
