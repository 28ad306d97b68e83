package work

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/retry"
	"github.com/delayq/delayq/internal/worked"
	"github.com/delayq/delayq/worker"
)

// App is a configured work process: the worker with its webhooks and the
// admin HTTP server.
type App struct {
	cfg    Config
	log    *slog.Logger
	rdb    redis.UniversalClient
	worker *worker.Worker
	srv    *admin.Server
	client *http.Client        // shared by the webhooks (and hooks)
	fast   *FastClient         // shared by the webhooks no proxy applies to (webhookfast.go)
	limits *limits             // nil without DQ_ETCD_ENDPOINTS
	pause  *pause.Watcher      // nil without DQ_ETCD_ENDPOINTS
	procs  *registry.Registrar // nil without DQ_ETCD_ENDPOINTS
	// topics checks that the consumed topics and the dead topic exist
	// (creating them with DQ_KAFKA_AUTO_CREATE): while a consumed one is
	// missing the process is not ready; a missing dead topic is reported
	// (ready.go).
	topics *kafkatopic.TopicCheck
	// outcomes publishes the worker's outcome records (nil: disabled)
	outcomes *outcome.Publisher
	// hooks calls the outcome hooks (nil: none configured); not part of
	// /readyz, see hooks.go
	hooks *Hooks
	// id is the process id: the worker's instance, the registry's id and
	// the "by" of the worked topics it declares
	id string
	// declared counts the consumed topics known declared worked
	// (delayq_work_topics_declared)
	declared atomic.Int64
}

// Run is the work binary: parse args and environment, build, run until ctx
// ends, shut down.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg Config
	b := config.NewBinder("work")
	cfg.Bind(b)
	if err := b.Parse(args, getenv, stderr); err != nil {
		return err
	}
	if err := cfg.Load(); err != nil {
		return err
	}
	log := cfg.Logger("work")
	log.Info("starting", b.LogAttrs()...)
	// the process' own environment, which the Go runtime read its GOGC
	// and GOMEMLIMIT from (getenv may be another: dq dev's, whose
	// applications share one process)
	log.Info("garbage collector", tuneGC(os.Getenv, log)...)
	app, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return app.Run(ctx)
}

// New builds an App from a loaded configuration and binds the HTTP
// listener (so Addr is known before Run).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// the worker's instance, the registry's process id, the worked topics' "by"
	a := &App{cfg: cfg, log: log, id: registry.DefaultID()}
	reg := admin.NewRegistry()
	kc, err := a.connect(ctx, reg)
	if err != nil {
		return nil, err
	}
	if err := a.build(ctx, kc, reg); err != nil {
		_ = a.outcomes.Close(ctx) // nil-safe
		if a.limits != nil {
			a.limits.Close()
		}
		a.rdb.Close()
		return nil, err
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: admin.Namespace, Name: "work_topics_declared",
		Help: "Topics this work process consumes that are declared worked in etcd (the rest: DQ_TOPICS not declared yet, or no etcd); a task fired to an undeclared topic ends delivered.",
	}, func() float64 { return float64(a.declared.Load()) }))
	if a.limits == nil {
		log.Warn("no etcd (DQ_ETCD_ENDPOINTS): the consumed topics cannot be declared worked; tasks fired to them end delivered "+
			"(not run to an outcome) unless another work process declares them; they still run when read", "topics", cfg.Topics)
	}
	return a, nil
}

// connect creates the Redis client and, with etcd, the live limits (over
// the etcd client); it returns Kafka's connection settings. On an error,
// what it opened is closed.
func (a *App) connect(ctx context.Context, reg *prometheus.Registry) (config.Conn, error) {
	cfg := a.cfg
	rdb, ha, err := cfg.RedisClientHA(a.log)
	if err != nil {
		return config.Conn{}, err
	}
	kc, err := cfg.Conn()
	if err != nil {
		rdb.Close()
		return config.Conn{}, err
	}
	reg.MustRegister(ha) // delayq_redis_failovers_total
	if len(cfg.EtcdEndpoints) > 0 {
		if a.limits, err = newLimits(ctx, cfg.Etcd, cfg.Namespace, rdb, reg, a.log); err != nil {
			rdb.Close()
			return config.Conn{}, err
		}
	}
	a.rdb = rdb
	return kc, nil
}

// build builds, in order, the outcome publisher, the pause watcher (with
// etcd), the worker and its webhooks, the outcome hooks, the topic check,
// the HTTP server and the registrar (with etcd).
func (a *App) build(ctx context.Context, kc config.Conn, reg *prometheus.Registry) error {
	cfg := a.cfg
	var err error
	a.outcomes, err = outcome.New(ctx, outcome.Config{
		Brokers:     cfg.Brokers,
		Topic:       cfg.OutcomesTopic,
		Conn:        kc,
		ClientID:    "delayq-work",
		Create:      cfg.AutoCreate,
		Partitions:  cfg.Partitions,
		Replication: cfg.Replication,
		Log:         a.log,
		Registerer:  reg,
	})
	if err != nil {
		return err
	}
	var pv worker.PauseView // nil: nothing paused
	if a.limits != nil {
		if a.pause, err = newPause(a.limits, cfg.Namespace, a.log); err != nil {
			return err
		}
		pv = a.pause
	}
	registerPausedTypes(reg, a.pause)
	if a.worker, err = worker.New(a.workerConfig(kc, reg, pv)); err != nil {
		return err
	}
	if err := a.handleWebhooks(); err != nil {
		return err
	}
	if a.hooks, err = newAppHooks(cfg, kc, a.client, reg, a.log); err != nil {
		return err
	}
	a.topics = kafkatopic.NewTopicCheck(kafkatopic.TopicCheckConfig{
		Brokers:     cfg.Brokers,
		Topics:      append(slices.Clone(cfg.Topics), cfg.DeadTopic),
		Create:      cfg.AutoCreate,
		Partitions:  cfg.Partitions,
		Replication: cfg.Replication,
		Conn:        kc,
		Log:         a.log,
	})
	return a.listen(reg)
}

// workerConfig is the worker's configuration: cfg's settings, the Redis
// client, the live limits and pause state (pv) when there is etcd, and
// the outcome publisher (outcomes.go).
func (a *App) workerConfig(kc config.Conn, reg *prometheus.Registry, pv worker.PauseView) worker.Config {
	cfg := a.cfg
	var wl worker.Limiter // nil: no limits
	if a.limits != nil {
		wl = a.limits
	}
	return worker.Config{
		Brokers:           cfg.Brokers,
		Group:             cfg.Group,
		Topics:            cfg.Topics,
		DeadTopic:         cfg.DeadTopic,
		Concurrency:       cfg.Concurrency,
		MaxHeld:           cfg.MaxHeld,
		MaxHeldBytes:      int64(cfg.MaxHeldBytes),
		DefaultTimeout:    cfg.DefaultTimeout,
		Backoff:           worker.Backoff{Min: cfg.BackoffMin, Max: cfg.BackoffMax, Jitter: jitter(cfg.BackoffJitter)},
		MaxPayload:        cfg.MaxPayload,
		MetricsMaxTypes:   cfg.MaxTypes,
		Redis:             a.rdb,
		Namespace:         cfg.Namespace,
		Shards:            cfg.Shards,
		Retention:         cfg.Retention,
		Acks:              worker.ReplicaAcks{Replicas: cfg.RedisReplicaAcks, Timeout: cfg.RedisAckTimeout, AOF: cfg.RedisWaitAOF},
		ClaimMargin:       cfg.ClaimMargin,
		ShutdownTimeout:   cfg.ShutdownGrace,
		SessionTimeout:    cfg.SessionTimeout,
		HeartbeatInterval: cfg.Heartbeat,
		Limiter:           wl,
		Pause:             pv,
		InstanceID:        a.id,
		KafkaTLS:          kc.TLS,
		KafkaSASL:         kc.SASL,
		Logger:            a.log,
		Registerer:        reg,
		OnOutcome:         onOutcome(a.outcomes, cfg.OutcomesAttempts), // outcomes.go
		UnhandledTypes:    cfg.unhandled(),
	}
}

// handleWebhooks creates the webhooks' shared HTTP client and registers
// the default webhook and one per type with the worker.
func (a *App) handleWebhooks() error {
	cfg := a.cfg
	webhookTLS, err := WebhookTLS(cfg.WebhookTLS)
	if err != nil {
		return err
	}
	a.client = NewHTTPClient(cfg.Concurrency, webhookTLS)
	a.fast = NewFastClient(cfg.Concurrency, webhookTLS)
	secret := []byte(cfg.WebhookSecret)
	if cfg.WebhookURL != "" {
		h, err := NewWebhook(cfg.WebhookURL, 0, secret, a.client)
		if err != nil {
			return err
		}
		a.useFast(h)
		a.worker.HandleDefault(h.Handle)
	}
	for typ, hc := range cfg.Webhooks {
		h, err := NewWebhook(hc.URL, hc.Timeout, secret, a.client)
		if err != nil {
			return fmt.Errorf("type %q: %w", typ, err)
		}
		a.useFast(h)
		a.worker.Handle(typ, h.Handle)
	}
	return nil
}

// useFast sends h's requests through the fast client unless a proxy from
// the environment applies to its URL (webhookfast.go).
func (a *App) useFast(h *Webhook) {
	if UseFast(h.URL) {
		h.Fast = a.fast
	}
}

// listen binds the admin HTTP server, ready while the worker consumes and
// its consumed topics exist (ready.go), and, with etcd, builds the
// registrar that advertises it.
func (a *App) listen(reg *prometheus.Registry) error {
	cfg := a.cfg
	a.registerDeadTopic(reg)
	mux := http.NewServeMux()
	admin.MountReport(mux, reg, a.report)
	var err error
	if a.srv, err = admin.Listen(cfg.HTTPAddr, mux, a.log, cfg.ShutdownGrace, admin.WithTLS(cfg.HTTPTLS)); err != nil {
		return fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err)
	}
	if a.limits != nil {
		addr := registry.AdvertiseAddr(cfg.HTTPAddr, a.srv.Addr())
		if a.procs, err = newRegistrar(a.limits, cfg.Namespace, a.id, addr, a.readyErr, reg, a.log); err != nil {
			return err
		}
	}
	return nil
}

// Worked topics (package worked): with etcd, a work process declares every
// topic it consumes (DQ_TOPICS) in /<ns>/worked/<topic>, without a lease,
// before it fetches its first record, so that the event processes keep the
// tasks fired to them "fired" until a worker finishes them (a task fired
// to an undeclared topic ends "delivered" once Kafka has it). A
// declaration is put-if-absent: the first one (its group, since and by)
// stays.
//
// At start the declaration is retried with a backoff for up to
// declareStart. What etcd refuses (a permission missing, a TLS or
// authentication error, a topic name it cannot be) fails the start at
// once, and so does an etcd that accepts connections but does not take
// the declaration within declareStart. Only when no etcd endpoint accepts
// a connection at all (etcd down or not deployed: etcd is not needed to
// run) does the process start consuming undeclared topics, with a
// warning, and go on declaring them in the background (declareLater):
// tasks fired to them meanwhile, were they undeclared, end delivered.
const (
	declareStart   = 10 * time.Second // all the attempts at start together
	declareAttempt = 3 * time.Second  // one attempt (every topic)
	declareDial    = time.Second      // the TCP check of one etcd endpoint
)

// declareTopics declares the consumed topics at start. later is true when
// etcd could not be reached: declareLater must go on. ctx ending is no
// error.
func (a *App) declareTopics(ctx context.Context) (later bool, err error) {
	sctx, cancel := context.WithTimeout(ctx, declareStart)
	defer cancel()
	b := retry.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	pending := slices.Clone(a.cfg.Topics)
	for {
		if !a.cfg.EtcdReachable(sctx, declareDial) {
			if ctx.Err() != nil {
				return false, nil
			}
			a.log.Warn("etcd unreachable: consuming topics not declared worked yet; declaring them in the background "+
				"(tasks fired to an undeclared topic end delivered)", "topics", pending, "endpoints", a.cfg.EtcdEndpoints)
			return true, nil
		}
		pending, err = a.declare(sctx, pending)
		if len(pending) == 0 {
			return false, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if errors.Is(err, worked.ErrInvalidTopic) || config.Misconfigured(err) {
			return false, fmt.Errorf("declare worked topics %s: etcd refused: %w", strings.Join(pending, ", "), err)
		}
		if perr := a.cfg.ProbeEtcd(sctx); perr != nil && config.Misconfigured(perr) {
			return false, fmt.Errorf("declare worked topics %s: %w", strings.Join(pending, ", "), perr)
		}
		a.log.Debug("declare worked topics: retrying", "topics", pending, "err", err)
		if !retry.Sleep(sctx, b.Next()) {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("declare worked topics %s: etcd did not take the declaration within %s: %w",
				strings.Join(pending, ", "), declareStart, err)
		}
	}
}

// declareLater declares the topics not declared at start until it is done
// or ctx ends.
func (a *App) declareLater(ctx context.Context) {
	b := retry.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	pending := slices.Clone(a.cfg.Topics)
	for {
		var err error
		if pending, err = a.declare(ctx, pending); len(pending) == 0 {
			a.log.Info("consumed topics declared worked", "topics", a.cfg.Topics)
			return
		}
		a.log.Debug("declare worked topics: retrying", "topics", pending, "err", err)
		if !retry.Sleep(ctx, b.Next()) {
			return
		}
	}
}

// declare declares each of topics in one attempt, and returns those it
// could not declare with the last error.
func (a *App) declare(ctx context.Context, topics []string) (pending []string, err error) {
	actx, cancel := context.WithTimeout(ctx, declareAttempt)
	defer cancel()
	for _, t := range topics {
		created, derr := worked.Declare(actx, a.limits.etcd, a.cfg.Namespace, t, a.cfg.Group, a.id)
		if derr != nil {
			pending, err = append(pending, t), derr
			continue
		}
		a.declared.Add(1)
		if created {
			a.log.Info("topic declared worked", "topic", t, "group", a.cfg.Group)
		}
	}
	return pending, err
}

// jitter maps the configured fraction to worker.Backoff's (where 0 means
// the default and a negative value none).
func jitter(j float64) float64 {
	if j == 0 {
		return -1
	}
	return j
}

// outcomeDrain bounds how long shutdown waits for queued outcome records.
const outcomeDrain = 5 * time.Second

// Addr is the admin HTTP server's bound address.
func (a *App) Addr() string { return a.srv.Addr() }

// Run runs the worker and the admin server until ctx ends or one of them
// fails.
//
// Shutdown order: the worker stops fetching, waits for running handlers up
// to DQ_SHUTDOWN_TIMEOUT (then cancels them; their records stay
// uncommitted), commits finished offsets and closes its Kafka reader and
// writer; meanwhile the hooks consumer stops fetching, lets hook requests
// in flight finish (up to DQ_SHUTDOWN_TIMEOUT), commits the outcomes it
// finished and leaves its group; the admin server drains; the outcome
// publisher writes what is queued (for at most 5s or DQ_SHUTDOWN_TIMEOUT; the rest is dropped and
// counted); then the webhooks' idle connections and,
// last, the etcd client (rate-limit rules, pause state, the process
// registration, deleted when ctx ends) and the Redis client are closed.
func (a *App) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if a.limits != nil {
			// the consumed topics are declared before the first fetch
			later, err := a.declareTopics(gctx)
			if err != nil {
				return err
			}
			if later {
				g.Go(func() error { a.declareLater(gctx); return nil })
			}
		}
		if gctx.Err() != nil {
			return nil
		}
		if err := a.worker.Run(gctx); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		return nil
	})
	if a.limits != nil {
		g.Go(func() error { return a.limits.Run(gctx) })
		g.Go(func() error { return a.pause.Run(gctx) })
		g.Go(func() error { return a.procs.Run(gctx) }) // unregisters at the end
	}
	g.Go(func() error { return a.topics.Run(gctx) })
	g.Go(func() error { a.watchDeadTopic(gctx); return nil })
	if a.hooks != nil {
		g.Go(func() error { return a.hooks.Run(gctx) }) // commits what it called, leaves its group
	}
	g.Go(func() error {
		if err := a.srv.Run(gctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	err := g.Wait()
	// the worker stopped: no outcome comes any more
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(a.cfg.ShutdownGrace, outcomeDrain))
	if cerr := a.outcomes.Close(octx); cerr != nil {
		a.log.Warn("close outcome publisher", "err", cerr)
	}
	cancel()
	a.client.CloseIdleConnections()
	if a.fast != nil {
		a.fast.CloseIdleConnections()
	}
	if a.limits != nil {
		if cerr := a.limits.Close(); cerr != nil {
			a.log.Warn("close etcd", "err", cerr)
		}
	}
	if cerr := a.rdb.Close(); cerr != nil && err == nil {
		a.log.Warn("close redis", "err", cerr)
	}
	a.log.Info("stopped")
	return err
}
