package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon/journal"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/lograte"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/registry"
)

// App is one daemon: the HTTP API, the store keeper (opens the Redis store
// and watches Redis), the compensator (replays the journal) and the
// coalescer (groups concurrent single schedules into one store call).
type App struct {
	cfg Config
	log *slog.Logger
	reg *prometheus.Registry
	m   *metrics
	now func() time.Time

	rdb     redis.UniversalClient
	cluster bool // rdb is a Redis Cluster client: each shard is its own failure domain
	// unconfirmed warns of writes whose replicas did not confirm them
	// (DQ_REDIS_REPLICA_ACKS), once a minute
	unconfirmed lograte.Warner
	store       atomic.Pointer[redisstore.Store] // nil until Redis answered once
	// redisUp: Redis answers. A single server: it answered the last
	// operation or ping. A cluster: some master answered the store
	// keeper's ping (the shards known down are in down).
	redisUp atomic.Bool
	down    shardHealth             // shards known down (cluster only; shardhealth.go)
	refused atomic.Pointer[refusal] // Redis answers but refused the last write (OOM, READONLY, ...)
	// misconfig is why Redis refuses delayq's settings (TLS, login,
	// permission; config.Misconfigured), nil while it does not.
	misconfig atomic.Pointer[string]
	jr        *journal.Journal
	// jrFailing is the journal check's failure last logged, nil while it
	// passes (health.go).
	jrFailing atomic.Pointer[string]
	lanes     *lanes        // journal entries per lane of ids (lanes.go)
	kick      chan struct{} // wakes the compensator (new journal entry, Redis or a shard back)

	etcd   *clientv3.Client    // nil when the limits API is disabled
	procs  *registry.Registrar // this daemon in the process registry; nil without etcd
	limits http.Handler
	seen   seenTypes // task types scheduled since start (GET /v1/types)

	srv      *admin.Server
	handler  http.Handler
	keeper   *storeKeeper
	comp     *compensator
	coalesce *coalescer
	// outcomes publishes "cancelled" outcome records; nil (disabled)
	// without DQ_KAFKA_BROKERS (see outcomes.go)
	outcomes *outcome.Publisher
}

// New builds a daemon from a validated configuration: it opens the journal,
// binds the HTTP address and tries once to open the Redis store. Redis
// being unreachable is not an error (the daemon journals writes and keeps
// trying in the background); a shard-count mismatch is. The caller must
// call Run, which releases everything New acquired.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	return newApp(ctx, cfg, log, true)
}

// NewEmbedded builds a daemon that binds no address, for a Go producer
// that runs the daemon in its own process (package embedded): its API is
// ScheduleTask, ScheduleTasks and Handler; cfg.HTTPAddr and cfg.HTTPTLS
// are not used, and it does not enter the process registry (it has no
// address to scrape). Run runs its background parts (store keeper,
// journal replay, group commit, shard map) until ctx ends; the caller
// must have stopped calling it before ctx ends (the HTTP daemon drains
// its server first for the same reason).
func NewEmbedded(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	return newApp(ctx, cfg, log, false)
}

func newApp(ctx context.Context, cfg Config, log *slog.Logger, listen bool) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &App{cfg: cfg, log: log, reg: admin.NewRegistry(), now: time.Now, kick: make(chan struct{}, 1),
		unconfirmed: lograte.Warner{Log: log, Every: time.Minute}}
	jr, err := journal.Open(cfg.JournalDir)
	if err != nil {
		return nil, err
	}
	a.jr = jr
	a.lanes = newLanes()
	if err := a.lanes.load(ctx, jr); err != nil {
		_ = a.jr.Close()
		return nil, err
	}
	a.m = newMetrics(a.reg,
		func() float64 { return float64(a.jr.Len()) },
		func() float64 {
			if a.redisUp.Load() {
				return 1
			}
			return 0
		},
		func() float64 {
			if a.redisWritable() {
				return 1
			}
			return 0
		},
		func() float64 { return float64(len(a.shardsDown())) })
	a.reg.MustRegister(newShardGauges(ctx, a.statsReader, log.With("component", "gauges")))
	var ha *config.RedisHA
	if a.rdb, ha, err = cfg.RedisClientHA(log); err != nil {
		_ = a.jr.Close()
		return nil, err
	}
	a.reg.MustRegister(ha) // delayq_redis_failovers_total
	_, a.cluster = a.rdb.(*redis.ClusterClient)
	a.keeper = &storeKeeper{app: a}
	a.comp = &compensator{app: a}
	a.coalesce = newCoalescer(a)
	if err := a.keeper.tryOpen(ctx); err != nil {
		_ = a.rdb.Close()
		_ = a.jr.Close()
		return nil, err
	}
	if err := a.openLimits(ctx); err != nil {
		_ = a.rdb.Close()
		_ = a.jr.Close()
		return nil, err
	}
	a.handler = a.routes()
	if listen {
		a.srv, err = admin.Listen(cfg.HTTPAddr, a.handler, log, cfg.ShutdownGrace, admin.WithTLS(cfg.HTTPTLS))
		if err != nil {
			_ = a.rdb.Close()
			_ = a.jr.Close()
			return nil, fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
		}
	}
	if a.procs, err = a.newRegistrar(); err != nil {
		_ = a.rdb.Close()
		_ = a.jr.Close()
		return nil, fmt.Errorf("process registry: %w", err)
	}
	if err := a.openOutcomes(ctx); err != nil { // last: nothing after it fails
		_ = a.rdb.Close()
		_ = a.jr.Close()
		return nil, fmt.Errorf("outcome publisher: %w", err)
	}
	if n := a.jr.Len(); n > 0 {
		log.Info("journal has entries left from an earlier run; replaying them once Redis answers", "journal_depth", n)
	}
	return a, nil
}

// Addr is the bound HTTP address ("" for an embedded daemon).
func (a *App) Addr() string {
	if a.srv == nil {
		return ""
	}
	return a.srv.Addr()
}

// Handler is the daemon's HTTP handler (API, /healthz, /readyz, /metrics),
// for tests that serve it themselves. The background components still need
// Run.
func (a *App) Handler() http.Handler { return a.handler }

// Registry is the daemon's Prometheus registry.
func (a *App) Registry() *prometheus.Registry { return a.reg }

// JournalDepth is the number of journal entries waiting for replay.
func (a *App) JournalDepth() int { return a.jr.Len() }

// Run serves until ctx ends (or a component fails), then shuts down.
//
// Shutdown order:
//  1. stop accepting HTTP connections,
//  2. drain in-flight requests (within DQ_SHUTDOWN_TIMEOUT; a request that
//     is journaling finishes its fsync'd append),
//  3. stop the compensator, which finishes the page it is replaying, and
//     the coalescer, once the groups queued in it are stored (a request
//     still arriving schedules alone),
//  4. close the journal (entries left are replayed by the next start),
//  5. close the Redis client,
//  6. close the outcome publisher (what is queued is written for at most
//     5s).
//
// The compensator and the coalescer run on a context that only ends after
// step 2, so that they serve the last requests.
func (a *App) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	compCtx, stopComp := context.WithCancel(context.WithoutCancel(ctx))
	defer stopComp()
	g.Go(func() error {
		defer stopComp()  // 3: after the HTTP server drained
		if a.srv == nil { // embedded: its caller stopped calling before ctx ended
			<-gctx.Done()
			return nil
		}
		err := a.srv.Run(gctx)
		a.log.Info("http server stopped; stopping the compensator", "journal_depth", a.jr.Len(), "error", err)
		return err
	})
	g.Go(func() error { return a.keeper.Run(gctx) })
	g.Go(func() error { return a.comp.Run(compCtx) })
	g.Go(func() error { return a.coalesce.Run(compCtx) })
	g.Go(func() error { a.followShardMap(gctx); return nil })
	g.Go(func() error { return a.runRegistrar(gctx) })
	a.log.Info("daemon started", "addr", a.Addr(), "namespace", a.cfg.Namespace,
		"journal_dir", a.cfg.JournalDir, "journal_depth", a.jr.Len(), "redis_up", a.redisUp.Load())
	err := g.Wait()
	if cerr := a.jr.Close(); cerr != nil { // 4
		err = errors.Join(err, cerr)
	}
	if cerr := a.rdb.Close(); cerr != nil { // 5
		err = errors.Join(err, cerr)
	}
	if a.etcd != nil {
		_ = a.etcd.Close()
	}
	a.closeOutcomes(ctx) // 6
	a.log.Info("daemon stopped", "journal_depth_left", a.jr.Len(), "error", err)
	return err
}

// openLimits connects (lazily: etcd need not be up yet) to the etcd that
// holds rate-limit rules and builds the /v1/limits handler.
func (a *App) openLimits(ctx context.Context) error {
	if len(a.cfg.EtcdEndpoints) == 0 {
		a.limits = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wire.WriteError(w, wire.Unavailable("rate limits are disabled: no etcd endpoints configured (DQ_ETCD_ENDPOINTS)"))
		})
		return nil
	}
	cli, err := a.cfg.EtcdClient(ctx)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	a.etcd = cli
	rules, err := ratelimit.NewRules(cli, a.cfg.Namespace, a.log.With("component", "limits"))
	if err != nil {
		return err
	}
	lim, err := ratelimit.NewLimiter(a.rdb, nil, ratelimit.Options{Namespace: a.cfg.Namespace})
	if err != nil {
		return err
	}
	a.limits = ratelimit.NewAPI(rules, lim, a.cfg.MaxBody)
	return nil
}

// setRedisUp records whether Redis answered and logs the transitions.
func (a *App) setRedisUp(up bool, cause error) {
	if a.redisUp.Swap(up) == up {
		return
	}
	if up {
		a.log.Info("redis reachable")
		a.wake()
	} else {
		a.log.Warn("redis unreachable; schedules go to the journal", "error", cause)
	}
}

// noteRedis records the result of a Redis operation.
func (a *App) noteRedis(err error) {
	a.noteMisconfig(err)
	switch {
	case err == nil:
		a.setRedisUp(true, nil)
	case redisstore.IsUnavailable(err) && !redisAnswered(err):
		a.m.redisErrs.Inc()
		a.setRedisUp(false, err)
	default:
		// Redis answered, with an error; a refused write (OOM, READONLY,
		// ...) is recorded by noteWrite.
		a.m.redisErrs.Inc()
		a.setRedisUp(true, nil)
	}
}

// wake nudges the compensator without blocking.
func (a *App) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// opContext bounds one Redis operation. It is detached from the request's
// cancellation: a client hanging up must not abort a write half-way.
func (a *App) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), a.cfg.RedisTimeout)
}

// Run is the daemon binary: it parses flags and DQ_* variables, validates
// them, logs the effective configuration and runs the daemon until ctx
// ends. It returns config.ErrHelp after printing the usage for -h.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg Config
	b := config.NewBinder("daemon")
	cfg.Bind(b)
	if err := b.Parse(args, getenv, stderr); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log := cfg.Logger("daemon")
	log.Info("starting", b.LogAttrs()...)
	// go-redis logs dial failures through a process-wide logger; route it
	// to slog at debug (the daemon logs Redis transitions itself).
	redis.SetLogger(redisLogger{log.With("component", "go-redis")})
	app, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return app.Run(ctx)
}

// redisLogger adapts go-redis' logger to slog.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
	}
}
