package leader

import (
	"context"

	"github.com/delayq/delayq/internal/event/etcdlease"
)

// session is the process's etcd session with the time of etcd's last
// keep-alive answer (internal/etcdlease). A process has one at a time:
// Manager.Run makes a new one when the last one died, and runSession
// drives it through a loop. Every shard run campaigns with it, so its
// lease is the lease of every key we hold.
type session = etcdlease.Session

// newSession grants a lease and follows its keep-alive answers.
func (m *Manager) newSession(ctx context.Context) (*session, error) {
	s, err := etcdlease.New(ctx, m.cfg.Client, m.ttl, m.margin)
	if err != nil {
		return nil, err
	}
	if m.m != nil {
		m.m.Sessions.Inc()
	}
	return s, nil
}
