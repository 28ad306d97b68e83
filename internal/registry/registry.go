package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/task"
)

// Process kinds.
const (
	KindDaemon = "daemon"
	KindEvent  = "event"
	KindWork   = "work"
)

// Proc is one registered process, the JSON value of its key.
type Proc struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`    // daemon, event or work
	Version   string    `json:"version"` // e.g. "v1.2.0 (rev 13be76f1c2a3, 2026-11-24T02:00:00Z) go1.26.0"
	Addr      string    `json:"addr"`    // its admin HTTP address (host:port)
	StartedAt time.Time `json:"started_at"`
	Ready     bool      `json:"ready"`
	Reason    string    `json:"reason,omitempty"` // why it is not ready (or what is degraded)
	// Counters are a few of the process's own figures, as of the last
	// refresh (Config.Counters): "fired" (event); "succeeded", "retried",
	// "dead" and "consumer_lag" (work); "scheduled" (created, daemon).
	// The console turns two readings into rates without Prometheus.
	Counters map[string]float64 `json:"counters,omitempty"`
	// AsOf is when the value was written: rates are the difference of two
	// readings' Counters over the difference of their AsOf.
	AsOf time.Time `json:"as_of"`
}

// Prefix is the etcd prefix of the registry of namespace ns.
func Prefix(ns string) string { return "/" + ns + "/procs/" }

// Key is the etcd key of process id of kind in namespace ns.
func Key(ns, kind, id string) string { return Prefix(ns) + kind + "/" + id }

// ReadyFunc says whether the process can do its job and, when not (or
// degraded), why, on one line. It is called about every Config.Poll, with
// a context bounded by it.
type ReadyFunc func(ctx context.Context) (ready bool, reason string)

// Defaults of Config.
const (
	DefaultTTL     = 10 * time.Second
	DefaultRefresh = 5 * time.Second
	DefaultPoll    = 500 * time.Millisecond
	// maxReason bounds the reason stored (etcd values should stay small).
	maxReason = 1024
)

// Config configures a Registrar.
type Config struct {
	Client    *clientv3.Client
	Namespace string
	// Proc names the process: ID, Kind and Addr are required; Version
	// defaults to config.Version's, StartedAt to now. Ready and Reason are
	// the Registrar's.
	Proc  Proc
	Ready ReadyFunc // nil: always ready
	// Counters, when set, is read at each write of the value (every
	// Refresh, and when readiness changes); see Proc.Counters and Sum.
	Counters func() map[string]float64

	TTL     time.Duration // the lease's; default 10s
	Refresh time.Duration // the value is written again this often; default 5s
	Poll    time.Duration // readiness is asked this often, written when it changed; default 500ms
	Log     *slog.Logger
}

// Registrar keeps one process's key in the registry (see Run).
type Registrar struct {
	cfg Config
	key string
	log *slog.Logger
}

// New checks cfg and returns its Registrar. It does not connect.
func New(cfg Config) (*Registrar, error) {
	p := &cfg.Proc
	switch {
	case cfg.Client == nil:
		return nil, errors.New("registry: no etcd client")
	case cfg.Namespace == "" || strings.Contains(cfg.Namespace, "/"):
		return nil, fmt.Errorf("registry: namespace %q: must be non-empty without '/'", cfg.Namespace)
	case p.Kind == "" || strings.ContainsAny(p.Kind, "/ \t\n"):
		return nil, fmt.Errorf("registry: kind %q: must be non-empty without '/' or white space", p.Kind)
	case p.ID == "" || strings.ContainsAny(p.ID, "/ \t\n"):
		return nil, fmt.Errorf("registry: process id %q: must be non-empty without '/' or white space", p.ID)
	case cfg.TTL < 0 || cfg.Refresh < 0 || cfg.Poll < 0:
		return nil, errors.New("registry: negative TTL, refresh or poll interval")
	}
	if p.Version == "" {
		p.Version = strings.TrimPrefix(config.Version(p.Kind), p.Kind+" ")
	}
	if p.StartedAt.IsZero() {
		p.StartedAt = time.Now()
	}
	p.StartedAt = p.StartedAt.UTC()
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	cfg.Refresh = cmp.Or(cfg.Refresh, DefaultRefresh)
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	if cfg.TTL < 2*time.Second {
		return nil, fmt.Errorf("registry: TTL %s below 2s", cfg.TTL)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) (bool, string) { return true, "" }
	}
	return &Registrar{cfg: cfg, key: Key(cfg.Namespace, p.Kind, p.ID), log: cfg.Log.With("component", "registry")}, nil
}

// Key is the registrar's etcd key.
func (r *Registrar) Key() string { return r.key }

// DefaultID is a process id unique enough for the registry:
// hostname-pid-random.
func DefaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "delayq"
	}
	host = strings.NewReplacer("/", "-", " ", "-").Replace(host)
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// errLeaseLost means the lease expired or was revoked.
var errLeaseLost = errors.New("lease lost")

// Run keeps the key until ctx ends, then deletes it (revoking its lease)
// and returns nil. It grants a lease, writes the value and keeps the lease
// alive; it writes the value again every Refresh and whenever readiness
// changes; when the lease is lost (etcd unreachable for longer than the
// TTL, or revoked) it grants a new one. etcd being unreachable is not an
// error: it retries with a backoff.
func (r *Registrar) Run(ctx context.Context) error {
	bo := retry.Backoff{Min: 200 * time.Millisecond, Max: r.cfg.TTL / 2}
	for {
		lease, err := r.grant(ctx)
		if err == nil {
			err = r.hold(ctx, lease)
			if ctx.Err() != nil {
				r.revoke(ctx, lease)
				return nil
			}
			bo.Reset()
		}
		if ctx.Err() != nil {
			return nil
		}
		delay := bo.Next()
		r.log.Warn("process registration interrupted; registering again", "key", r.key, "err", err, "retry_in", delay)
		if !retry.Sleep(ctx, delay) {
			return nil
		}
	}
}

func (r *Registrar) grant(ctx context.Context) (clientv3.LeaseID, error) {
	gctx, cancel := context.WithTimeout(ctx, r.cfg.TTL/2)
	defer cancel()
	resp, err := r.cfg.Client.Grant(gctx, int64(r.cfg.TTL/time.Second))
	if err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	return resp.ID, nil
}

// revoke deletes the key with its lease, within a short fresh deadline.
func (r *Registrar) revoke(ctx context.Context, lease clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := r.cfg.Client.Revoke(rctx, lease); err != nil {
		r.log.Warn("unregister: revoke lease; the key expires with it", "key", r.key, "err", err)
	}
}

// hold keeps the key under lease until the lease is lost (it returns why)
// or ctx ends (nil).
func (r *Registrar) hold(ctx context.Context, lease clientv3.LeaseID) error {
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ka, err := r.cfg.Client.KeepAlive(kctx, lease)
	if err != nil {
		return fmt.Errorf("keep lease alive: %w", err)
	}
	p := r.cfg.Proc
	p.Ready, p.Reason = r.readiness(ctx)
	written := false
	if err := r.put(ctx, lease, p); err != nil {
		if errors.Is(err, errLeaseLost) {
			return err
		}
		r.log.Warn("register process", "key", r.key, "err", err)
	} else {
		written = true
		r.log.Info("process registered", "key", r.key, "ready", p.Ready, "lease", fmt.Sprintf("%x", int64(lease)))
	}
	refresh := time.NewTicker(r.cfg.Refresh)
	defer refresh.Stop()
	poll := time.NewTicker(r.cfg.Poll)
	defer poll.Stop()
	for {
		write := false
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ka:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errLeaseLost
			}
			continue
		case <-refresh.C:
			write = true
		case <-poll.C:
		}
		ready, reason := r.readiness(ctx)
		if ready != p.Ready || reason != p.Reason {
			if ready != p.Ready {
				r.log.Info("readiness changed", "ready", ready, "reason", reason)
			}
			p.Ready, p.Reason = ready, reason
			written = false
		}
		if written && !write {
			continue
		}
		if err := r.put(ctx, lease, p); err != nil {
			if errors.Is(err, errLeaseLost) || ctx.Err() != nil {
				return err
			}
			r.log.Warn("refresh process registration", "key", r.key, "err", err)
			written = false
			continue
		}
		written = true
	}
}

func (r *Registrar) readiness(ctx context.Context) (bool, string) {
	rctx, cancel := context.WithTimeout(ctx, max(r.cfg.Poll, 2*time.Second))
	defer cancel()
	ready, reason := r.cfg.Ready(rctx)
	reason = strings.ReplaceAll(reason, "\n", "; ")
	return ready, task.Truncate(reason, maxReason)
}

func (r *Registrar) put(ctx context.Context, lease clientv3.LeaseID, p Proc) error {
	if r.cfg.Counters != nil {
		p.Counters = r.cfg.Counters()
	}
	p.AsOf = time.Now().UTC()
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.TTL/2)
	defer cancel()
	if _, err := r.cfg.Client.Put(pctx, r.key, string(b), clientv3.WithLease(lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return errLeaseLost
		}
		return fmt.Errorf("put %s: %w", r.key, err)
	}
	return nil
}

// List reads every process registered in namespace ns, sorted by kind,
// then id. A value that does not decode is left out.
func List(ctx context.Context, cli *clientv3.Client, ns string) ([]Proc, error) {
	if ns == "" || strings.Contains(ns, "/") {
		return nil, fmt.Errorf("registry: namespace %q: must be non-empty without '/'", ns)
	}
	resp, err := cli.Get(ctx, Prefix(ns), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]Proc, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p Proc
		if json.Unmarshal(kv.Value, &p) != nil || p.ID == "" || p.Kind == "" {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Proc) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// AdvertiseAddr is the address other processes reach an admin listener
// at: the bound port (the one picked when the configured port is 0), on
// the configured host, or on this machine's hostname when the configured
// host is empty or unspecified (":9102", "0.0.0.0:9102", "[::]:9102").
func AdvertiseAddr(configured, bound string) string {
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	host, _, err := net.SplitHostPort(configured)
	if err != nil {
		host = ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		} else {
			bh, _, _ := net.SplitHostPort(bound)
			host = bh
		}
	}
	return net.JoinHostPort(host, port)
}
