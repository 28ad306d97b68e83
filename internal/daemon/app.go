package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/registry"
)

// App is one daemon, as wiring: the ingest core (core.go: the write path,
// Redis and the journal), the HTTP surface on top of it (api.go: routing,
// the guard, the handler adapter; a file per resource: tasks.go, dead.go,
// stats.go, operator.go, types.go, cluster.go, shards.go, schedules.go,
// limits.go), the etcd client of the limits, pause, schedules and shard
// map endpoints, the process registry and the outcome publisher.
type App struct {
	cfg  Config
	log  *slog.Logger
	reg  *prometheus.Registry
	hm   *httpMetrics
	core *core // the ingest core

	etcd   *clientv3.Client    // nil when the limits API is disabled
	procs  *registry.Registrar // this daemon in the process registry; nil without etcd
	limits *limitsAPI          // /v1/limits (limits.go)
	census *census             // /v1/counts, /v1/load, /v1/history: the cached counts and the gauge sampler (census.go)

	srv     *admin.Server
	handler http.Handler
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
	a := &App{cfg: cfg, log: log, reg: admin.NewRegistry()}
	a.hm = newHTTPMetrics(a.reg)
	a.census = newCensus()
	co, err := newCore(ctx, cfg, log, a.reg)
	if err != nil {
		return nil, err
	}
	a.core = co
	if err := a.openLimits(ctx); err != nil {
		_ = co.close()
		return nil, err
	}
	a.handler = a.routes()
	if listen {
		a.srv, err = admin.Listen(cfg.HTTPAddr, a.handler, log, cfg.ShutdownGrace, admin.WithTLS(cfg.HTTPTLS))
		if err != nil {
			_ = co.close()
			return nil, fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
		}
	}
	if a.procs, err = a.newRegistrar(); err != nil {
		_ = co.close()
		return nil, fmt.Errorf("process registry: %w", err)
	}
	if err := a.openOutcomes(ctx); err != nil { // last: nothing after it fails
		_ = co.close()
		return nil, fmt.Errorf("outcome publisher: %w", err)
	}
	if n := co.journalDepth(); n > 0 {
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
func (a *App) JournalDepth() int { return a.core.journalDepth() }

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
		a.log.Info("http server stopped; stopping the compensator", "journal_depth", a.core.journalDepth(), "error", err)
		return err
	})
	g.Go(func() error { return a.core.keeper.Run(gctx) })
	g.Go(func() error { return a.core.comp.Run(compCtx) })
	g.Go(func() error { return a.core.coalesce.Run(compCtx) })
	g.Go(func() error { a.followShardMap(gctx); return nil })
	g.Go(func() error { return a.runRegistrar(gctx) })
	if a.srv != nil {
		// GET /v1/history's gauges, for the console: a served daemon
		// samples, an embedded producer (no console) does not
		g.Go(func() error { a.census.gauges.run(gctx, a.sampleGauges); return nil })
	}
	a.log.Info("daemon started", "addr", a.Addr(), "namespace", a.cfg.Namespace,
		"journal_dir", a.cfg.JournalDir, "journal_depth", a.core.journalDepth(), "redis_up", a.core.redisUp.Load())
	err := g.Wait()
	if cerr := a.core.close(); cerr != nil { // 4, 5
		err = errors.Join(err, cerr)
	}
	if a.etcd != nil {
		_ = a.etcd.Close()
	}
	a.closeOutcomes(ctx) // 6
	a.log.Info("daemon stopped", "journal_depth_left", a.core.journalDepth(), "error", err)
	return err
}

// openLimits connects (lazily: etcd need not be up yet) to the etcd that
// holds rate-limit rules and builds the /v1/limits endpoints.
func (a *App) openLimits(ctx context.Context) error {
	a.limits = &limitsAPI{maxBody: a.cfg.MaxBody}
	if len(a.cfg.EtcdEndpoints) == 0 {
		return nil // disabled: every /v1/limits request answers 503
	}
	cli, err := a.cfg.EtcdClient(ctx)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	a.etcd = cli
	if a.limits.rules, err = ratelimit.NewRules(cli, a.cfg.Namespace, a.log.With("component", "limits")); err != nil {
		return err
	}
	a.limits.lim, err = ratelimit.NewLimiter(a.core.rdb, nil, ratelimit.Options{Namespace: a.cfg.Namespace})
	return err
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
