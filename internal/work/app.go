package work

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/pause"
	"github.com/delayq/delayq/internal/registry"
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
	client *http.Client        // shared by the webhooks
	limits *limits             // nil without DQ_ETCD_ENDPOINTS
	pause  *pause.Watcher      // nil without DQ_ETCD_ENDPOINTS
	procs  *registry.Registrar // nil without DQ_ETCD_ENDPOINTS
	// topics checks that the consumed topics and the dead topic exist
	// (creating them with DQ_KAFKA_AUTO_CREATE): while one is missing the
	// process is not ready.
	topics *kafkatopic.TopicCheck
	// outcomes publishes the worker's outcome records (nil: disabled)
	outcomes *outcome.Publisher
	// hooks calls the outcome hooks (nil: none configured); not part of
	// /readyz, see hooks.go
	hooks *Hooks
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
	rdb, ha, err := cfg.RedisClientHA(log)
	if err != nil {
		return nil, err
	}
	kc, err := cfg.Conn()
	if err != nil {
		rdb.Close()
		return nil, err
	}
	reg := admin.NewRegistry()
	reg.MustRegister(ha) // delayq_redis_failovers_total
	var lim *limits
	var wl worker.Limiter
	if len(cfg.EtcdEndpoints) > 0 {
		if lim, err = newLimits(ctx, cfg.Etcd, cfg.Namespace, rdb, reg, log); err != nil {
			rdb.Close()
			return nil, err
		}
		wl = lim
	}
	var pub *outcome.Publisher
	fail := func(err error) (*App, error) {
		_ = pub.Close(ctx) // nil-safe
		if lim != nil {
			lim.Close()
		}
		rdb.Close()
		return nil, err
	}
	pub, err = outcome.New(ctx, outcome.Config{
		Brokers:     cfg.Brokers,
		Topic:       cfg.OutcomesTopic,
		Conn:        kc,
		ClientID:    "delayq-work",
		Create:      cfg.AutoCreate,
		Partitions:  cfg.Partitions,
		Replication: cfg.Replication,
		Log:         log,
		Registerer:  reg,
	})
	if err != nil {
		return fail(err)
	}
	id := registry.DefaultID() // the worker's instance and the registry's process id
	var pw *pause.Watcher
	var pv worker.PauseView // nil: nothing paused
	if lim != nil {
		if pw, err = newPause(lim, cfg.Namespace, log); err != nil {
			return fail(err)
		}
		pv = pw
	}
	registerPausedTypes(reg, pw)
	w, err := worker.New(worker.Config{
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
		Redis:             rdb,
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
		InstanceID:        id,
		KafkaTLS:          kc.TLS,
		KafkaSASL:         kc.SASL,
		Logger:            log,
		Registerer:        reg,
		OnOutcome:         onOutcome(pub, cfg.OutcomesAttempts), // outcomes.go
	})
	if err != nil {
		return fail(err)
	}
	webhookTLS, err := WebhookTLS(cfg.WebhookTLS)
	if err != nil {
		return fail(err)
	}
	client := NewHTTPClient(cfg.Concurrency, webhookTLS)
	secret := []byte(cfg.WebhookSecret)
	if cfg.WebhookURL != "" {
		h, err := NewWebhook(cfg.WebhookURL, 0, secret, client)
		if err != nil {
			return fail(err)
		}
		w.HandleDefault(h.Handle)
	}
	for typ, hc := range cfg.Webhooks {
		h, err := NewWebhook(hc.URL, hc.Timeout, secret, client)
		if err != nil {
			return fail(fmt.Errorf("type %q: %w", typ, err))
		}
		w.Handle(typ, h.Handle)
	}
	hooks, err := newAppHooks(cfg, kc, client, reg, log)
	if err != nil {
		return fail(err)
	}
	topics := kafkatopic.NewTopicCheck(kafkatopic.TopicCheckConfig{
		Brokers:     cfg.Brokers,
		Topics:      append(slices.Clone(cfg.Topics), cfg.DeadTopic),
		Create:      cfg.AutoCreate,
		Partitions:  cfg.Partitions,
		Replication: cfg.Replication,
		Conn:        kc,
		Log:         log,
	})
	mux := http.NewServeMux()
	ready := func(ctx context.Context) error {
		err := w.Ready(ctx)
		if err == nil || errors.Is(err, worker.ErrWaitingForTopics) {
			// while the worker waits for its topics, the topic check says
			// why, with the configured TLS/SASL's diagnosis (a
			// misconfigured login, a missing topic)
			if terr := topicsReady(topics); terr != nil {
				return terr
			}
		}
		return err
	}
	admin.Mount(mux, reg, ready)
	srv, err := admin.Listen(cfg.HTTPAddr, mux, log, cfg.ShutdownGrace, admin.WithTLS(cfg.HTTPTLS))
	if err != nil {
		return fail(fmt.Errorf("http listen %s: %w", cfg.HTTPAddr, err))
	}
	var procs *registry.Registrar
	if lim != nil {
		if procs, err = newRegistrar(lim, cfg.Namespace, id, registry.AdvertiseAddr(cfg.HTTPAddr, srv.Addr()), ready, reg, log); err != nil {
			return fail(err)
		}
	}
	return &App{cfg: cfg, log: log, rdb: rdb, worker: w, srv: srv, client: client, limits: lim, pause: pw, procs: procs, topics: topics,
		outcomes: pub, hooks: hooks}, nil
}

// topicsReady is the Kafka topics' part of /readyz: a missing topic (or
// no answer from Kafka yet) means not ready, naming the topics.
func topicsReady(c *kafkatopic.TopicCheck) error {
	missing, err := c.Missing()
	switch {
	case err != nil:
		return fmt.Errorf("kafka: %w", err)
	case len(missing) > 0:
		return fmt.Errorf("kafka topics missing: %s (create them or set DQ_KAFKA_AUTO_CREATE=true)", strings.Join(missing, ", "))
	}
	return nil
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
