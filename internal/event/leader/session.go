package leader

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/delayq/delayq/internal/retry"
)

// session is a concurrency.Session plus the time of its last keep-alive
// answer. A process has one at a time: Manager.Run makes a new one when
// the last one died, and runSession drives it through a loop. Every shard
// run campaigns with it, so its lease is the lease of every key we hold.
type session struct {
	*concurrency.Session
	m      *Manager
	answer atomic.Int64 // since m.base
	kaDone chan struct{}
}

// answered records a keep-alive answer received at at; answers only move
// forward.
func (s *session) answered(at time.Time) {
	d := int64(at.Sub(s.m.base))
	for {
		old := s.answer.Load()
		if d <= old || s.answer.CompareAndSwap(old, d) {
			return
		}
	}
}

// validUntil is Lead.ValidUntil: the last answer plus the TTL, less the
// margin for the answer's way back.
func (s *session) validUntil() time.Time {
	return s.m.base.Add(time.Duration(s.answer.Load()) + s.m.ttl - s.m.margin)
}

// confirmed waits, at most d, until a keep-alive answer vouches for the
// lease (validUntil ahead of now). It reports false when none came in time
// or ctx ended.
func (s *session) confirmed(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Until(s.validUntil()) <= 0 {
		if time.Now().After(deadline) || !retry.Sleep(ctx, 20*time.Millisecond) {
			return false
		}
	}
	return true
}

// newSession grants a lease, wraps it in a concurrency.Session and follows
// its keep-alive answers (kaDone is closed when the keep-alive stream ends).
func (m *Manager) newSession(ctx context.Context) (*session, error) {
	gctx, cancel := context.WithTimeout(ctx, m.ttl)
	defer cancel()
	g, err := m.cfg.Client.Grant(gctx, int64(m.ttlSec))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	cs, err := concurrency.NewSession(m.cfg.Client, concurrency.WithLease(g.ID), concurrency.WithTTL(m.ttlSec))
	if err != nil {
		m.revoke(ctx, g.ID)
		return nil, fmt.Errorf("session: %w", err)
	}
	s := &session{Session: cs, m: m, kaDone: make(chan struct{})}
	// The server started the lease before its answer arrived; the margin
	// covers the answer's way back (as for every keep-alive answer).
	s.answered(time.Now())
	ka, err := m.cfg.Client.KeepAlive(cs.Ctx(), g.ID)
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
	if m.m != nil {
		m.m.Sessions.Inc()
	}
	return s, nil
}
