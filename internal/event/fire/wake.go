package fire

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/redisstore"
)

// Mailbox wakes one shard's poller. The poller arms it with the Redis time
// it sleeps until; a wake-up for a task due before that (or any wake-up
// while the poller is busy) interrupts the sleep.
type Mailbox struct {
	c     chan struct{}
	until atomic.Int64 // Redis unix ms the poller sleeps until; 0: busy
}

// NewMailbox returns an unarmed mailbox.
func NewMailbox() *Mailbox { return &Mailbox{c: make(chan struct{}, 1)} }

// C is signalled when the poller should look again.
func (m *Mailbox) C() <-chan struct{} { return m.c }

// Arm records that the poller sleeps until the Redis time untilMS.
func (m *Mailbox) Arm(untilMS int64) { m.until.Store(untilMS) }

// Disarm records that the poller is busy (it will take again anyway).
func (m *Mailbox) Disarm() { m.until.Store(0) }

// Wake tells the poller a task is due at dueMS. While it is busy the
// signal is kept, because its current take may have run just before the
// task was scheduled; while it sleeps past dueMS it wakes up.
func (m *Mailbox) Wake(dueMS int64) {
	if u := m.until.Load(); u == 0 || dueMS < u {
		m.Kick()
	}
}

// Kick wakes the poller unconditionally (non-blocking).
func (m *Mailbox) Kick() {
	select {
	case m.c <- struct{}{}:
	default:
	}
}

// Wakeups is the process' one Redis SUBSCRIBE on the store's wake channel,
// dispatching its messages (redisstore.ParseWake) to the shards' mailboxes.
type Wakeups struct {
	rdb     redis.UniversalClient
	channel string
	boxes   []*Mailbox
	log     *slog.Logger
	// HealthInterval is how long the subscription may be silent before a
	// PING checks it (default 5s).
	HealthInterval time.Duration
	subscribed     atomic.Int64
}

// NewWakeups returns a subscriber for shards mailboxes.
func NewWakeups(rdb redis.UniversalClient, channel string, shards int, log *slog.Logger) *Wakeups {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Wakeups{rdb: rdb, channel: channel, boxes: make([]*Mailbox, shards), log: log, HealthInterval: 5 * time.Second}
	for i := range w.boxes {
		w.boxes[i] = NewMailbox()
	}
	return w
}

// Mailbox is shard's mailbox.
func (w *Wakeups) Mailbox(shard int) *Mailbox { return w.boxes[shard] }

// Subscriptions counts (re)subscriptions so far (for tests and logs).
func (w *Wakeups) Subscriptions() int64 { return w.subscribed.Load() }

// Run subscribes and dispatches until ctx ends. When the connection drops,
// go-redis reconnects and subscribes again; every (re)subscription kicks all
// pollers, because wake-ups may have been lost in between (the bounded idle
// poll covers them anyway).
func (w *Wakeups) Run(ctx context.Context) error {
	ps := w.rdb.Subscribe(ctx, w.channel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	failures := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, w.HealthInterval)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				// Silent for a while: a PING checks the connection (its
				// answer or error comes back through Receive).
				if perr := ps.Ping(ctx); perr != nil && ctx.Err() == nil {
					w.log.Debug("wake subscription ping", "err", perr)
				}
				continue
			}
			failures++
			if failures == 1 || failures%50 == 0 {
				w.log.Warn("wake subscription", "err", err, "failures", failures)
			}
			select {
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, time.Second)):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		failures = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				w.subscribed.Add(1)
				for _, b := range w.boxes {
					b.Kick()
				}
			}
		case *redis.Message:
			w.dispatch(m.Payload)
		}
	}
}

func (w *Wakeups) dispatch(payload string) {
	shard, due, ok := redisstore.ParseWake(payload)
	if !ok || shard >= len(w.boxes) {
		return
	}
	w.boxes[shard].Wake(due)
}
