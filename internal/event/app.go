package event

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/event/fire"
	"github.com/delayq/delayq/internal/event/leader"
	"github.com/delayq/delayq/internal/event/scheduler"
	"github.com/delayq/delayq/internal/kafkatopic"
	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/shardmap"
	"github.com/delayq/delayq/internal/worked"
)

// App is one event process: the etcd leadership manager, one poller per
// led shard, the wake-up subscriber, the Kafka writer and the admin HTTP
// server.
type App struct {
	cfg   Config
	log   *slog.Logger
	reg   *prometheus.Registry
	rdb   redis.UniversalClient
	store *redisstore.Store
	etcd  *clientv3.Client
	kafka *fire.Kafka
	wakes *fire.Wakeups
	mgr   *leader.Manager
	srv   *admin.Server
	fm    *fire.Metrics
	// poll runs the poller of one led shard: runPoller (tests wrap it to
	// watch the pollers, helpers_test.go)
	poll func(ctx context.Context, cfg fire.Config) error
	// topics checks that the default and dead topics exist (creating them
	// with KafkaAutoCreate); a missing one is named in /readyz, which
	// stays ready: tasks of other topics still fire.
	topics *kafkatopic.TopicCheck
	grow   *growth
	// procs keeps this process in the registry (GET /v1/cluster), under
	// its process id, the one its shard elections name
	procs *registry.Registrar
	// sched is the schedule scheduler's campaign (nil with
	// DQ_SCHEDULER=false)
	sched *scheduler.Scheduler
	// outcomes publishes the "dead" outcome records of tasks made dead at
	// fire time (nil: DQ_OUTCOMES_TOPIC="")
	outcomes *outcome.Publisher
	// worked is the watched registry of worked topics (package worked):
	// the topics delayq work processes handle. Until it listed them once,
	// /readyz is not ready.
	worked *worked.View
}

// New builds an event process from cfg: it connects to Redis (the store
// must open: a shard-count mismatch is fatal), creates the etcd client and
// the Kafka writer (both connect lazily; etcd and Kafka may be down at
// start) and binds the HTTP address. The caller must call Run, which
// releases everything New acquired.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &App{cfg: cfg, log: log, reg: admin.NewRegistry(), poll: runPoller}
	a.fm = fire.NewMetrics(a.reg)
	kc, err := a.openClients(ctx)
	if err != nil {
		return nil, err
	}
	a.newFiring(kc)
	if err := a.newComponents(ctx, kc); err != nil {
		a.closeClients()
		return nil, err
	}
	return a, nil
}

// openClients connects to Redis and opens the store, then creates the
// etcd client and the worked-topics view; it returns Kafka's connection
// settings. On an error, what it opened is closed.
func (a *App) openClients(ctx context.Context) (config.Conn, error) {
	cfg := a.cfg
	var err error
	var ha *config.RedisHA
	if a.rdb, ha, err = cfg.RedisClientHA(a.log); err != nil {
		return config.Conn{}, err
	}
	a.reg.MustRegister(ha) // delayq_redis_failovers_total
	kc, err := cfg.Conn()
	if err == nil {
		err = a.openStore(ctx)
	}
	if err == nil {
		if a.etcd, err = cfg.EtcdClient(ctx); err != nil {
			err = fmt.Errorf("etcd client: %w", err)
		}
	}
	if err != nil {
		_ = a.rdb.Close()
		return config.Conn{}, err
	}
	a.worked = worked.NewView(a.etcd, cfg.Namespace, a.log.With("component", "worked"))
	return kc, nil
}

// openStore opens the task store, which follows the namespace's shard map.
func (a *App) openStore(ctx context.Context) error {
	cfg := a.cfg
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	store, err := redisstore.New(sctx, a.rdb, redisstore.Options{Namespace: cfg.Namespace, Shards: cfg.Shards, Retention: cfg.Retention,
		// the scheduler's ticks are schedules: durable like the daemon's
		ReplicaAcks: cfg.RedisReplicaAcks, AckTimeout: cfg.RedisAckTimeout, WaitAOF: cfg.RedisWaitAOF})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	a.store = store
	if sm := store.Map(); sm.Count != cfg.Shards {
		a.log.Info("following the namespace's shard map, not DQ_SHARDS", "namespace_shards", sm.Count,
			"configured_shards", cfg.Shards, "state", sm.State)
	}
	return nil
}

// newFiring builds what the pollers share: the Kafka writer, the check of
// the default and dead topics, the wake-up subscriber and the shard map's
// growth.
func (a *App) newFiring(kc config.Conn) {
	cfg := a.cfg
	a.kafka = fire.NewKafka(fire.KafkaConfig{
		Brokers:      cfg.KafkaBrokers,
		BatchSize:    cfg.FireBatch,
		BatchTimeout: cfg.KafkaBatchWait,
		WriteTimeout: cfg.KafkaTimeout,
		AutoCreate:   cfg.KafkaAutoCreate,
		Partitions:   cfg.Partitions,
		Replication:  cfg.Replication,
		Conn:         kc,
		Log:          a.log,
	})
	a.topics = kafkatopic.NewTopicCheck(kafkatopic.TopicCheckConfig{
		Brokers:     cfg.KafkaBrokers,
		Topics:      []string{cfg.DefaultTopic, cfg.DeadTopic},
		Create:      cfg.KafkaAutoCreate,
		Partitions:  cfg.Partitions,
		Replication: cfg.Replication,
		Conn:        kc,
		Log:         a.log,
	})
	a.wakes = fire.NewWakeups(a.rdb, a.store.WakeChannel(), shardmap.MaxShards, a.log)
	a.grow = newGrowth(a)
}

// newComponents builds, in order, the leadership manager, the HTTP
// server, the registrar, the scheduler and, last, the outcome publisher
// (nothing after it can fail; Run closes it).
func (a *App) newComponents(ctx context.Context, kc config.Conn) error {
	cfg := a.cfg
	var err error
	a.mgr, err = leader.New(leader.Config{
		Client:          a.etcd,
		Namespace:       cfg.Namespace,
		Shards:          a.store.Map().Count,
		ID:              cfg.ProcessID,
		TTL:             cfg.SessionTTL,
		Lead:            a.lead,
		Log:             a.log,
		Metrics:         leader.NewMetrics(a.reg),
		ShutdownTimeout: cfg.ShutdownGrace,
	})
	if err != nil {
		return err
	}
	if err := a.listen(); err != nil {
		return err
	}
	if a.procs, err = a.newRegistrar(); err != nil {
		return err
	}
	if cfg.Scheduler {
		if a.sched, err = a.newScheduler(); err != nil {
			return err
		}
	}
	a.outcomes, err = outcome.New(ctx, outcome.Config{
		Brokers:     cfg.KafkaBrokers,
		Topic:       cfg.OutcomesTopic,
		Conn:        kc,
		ClientID:    "delayq-event",
		Create:      cfg.KafkaAutoCreate,
		Partitions:  cfg.Partitions,
		Replication: cfg.Replication,
		Log:         a.log,
		Registerer:  a.reg,
	})
	return err
}

// listen binds the admin HTTP server: admin's endpoints, with this
// process' /readyz.
func (a *App) listen() error {
	inner := http.NewServeMux()
	admin.Mount(inner, a.reg, func(context.Context) error { return a.mgr.Ready() })
	mux := http.NewServeMux()
	mux.Handle("/", inner)
	mux.HandleFunc("GET /readyz", a.readyz)
	var err error
	a.srv, err = admin.Listen(a.cfg.HTTPAddr, mux, a.log, a.cfg.ShutdownGrace, admin.WithTLS(a.cfg.HTTPTLS))
	return err
}

// newScheduler builds the schedules' scheduler (DQ_SCHEDULER).
func (a *App) newScheduler() (*scheduler.Scheduler, error) {
	cfg := a.cfg
	return scheduler.New(scheduler.Config{
		Client:    a.etcd,
		Namespace: cfg.Namespace,
		Store:     a.store,
		ID:        cfg.ProcessID,
		TTL:       cfg.SessionTTL,
		Interval:  cfg.SchedulerInterval,
		Lookahead: cfg.SchedulerLookahead,
		Log:       a.log,
		Metrics:   scheduler.NewMetrics(a.reg),
	})
}

// readyz is admin's /readyz (ready while the leadership manager is, once
// the worked topics were listed: reason "worked topics not loaded" until
// then) with the Kafka topics in the body: a missing default or dead topic
// is named ("missing_topics") but does not make the process unready,
// because the tasks of every other topic still fire.
func (a *App) readyz(w http.ResponseWriter, r *http.Request) {
	code, body := a.readiness(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// readiness is what /readyz answers: its status code and body.
func (a *App) readiness(ctx context.Context) (int, map[string]any) {
	body := map[string]any{"status": "ready"}
	code := http.StatusOK
	if err := a.mgr.Ready(); err != nil {
		code = http.StatusServiceUnavailable
		body["status"], body["reason"] = "not ready", err.Error()
		// etcd's client retries a failed TLS handshake silently: say why
		if perr := a.cfg.ProbeEtcd(ctx); perr != nil {
			body["etcd"] = perr.Error()
		}
	}
	select {
	case <-a.worked.Ready():
	default:
		// until then every topic would look unworked
		code = http.StatusServiceUnavailable
		body["status"] = "not ready"
		if r, _ := body["reason"].(string); r != "" {
			body["reason"] = r + "; " + notLoaded
		} else {
			body["reason"] = notLoaded
		}
	}
	missing, err := a.topics.Missing()
	switch {
	case err != nil && config.Misconfigured(err):
		// Kafka refuses our TLS or SASL settings: no task can fire
		code = http.StatusServiceUnavailable
		body["status"] = "not ready"
		body["kafka"] = "misconfigured: " + err.Error()
	case err != nil:
		body["kafka"] = "topics not checked: " + err.Error()
	case len(missing) > 0:
		body["missing_topics"] = missing
		body["kafka"] = "topics missing: " + strings.Join(missing, ", ") + " (their tasks cannot fire; create them or set DQ_KAFKA_AUTO_CREATE=true)"
	default:
		body["kafka"] = "ok"
	}
	return code, body
}

// notLoaded is /readyz's reason while the worked topics were not listed.
const notLoaded = "worked topics not loaded"

// Addr is the bound HTTP address.
func (a *App) Addr() string { return a.srv.Addr() }

// ProcessID is the process' name in etcd.
func (a *App) ProcessID() string { return a.cfg.ProcessID }

// Leading returns the shards this process leads.
func (a *App) Leading() []int { return a.mgr.Leading() }

// Lease is the current etcd session lease (0 without a session).
func (a *App) Lease() clientv3.LeaseID { return a.mgr.Lease() }

// Registry is the app's metrics registry.
func (a *App) Registry() *prometheus.Registry { return a.reg }

// lead runs the poller of one led shard under the leadership context and,
// while the shard map grows, the mover of the shard (see growth.go).
func (a *App) lead(ctx context.Context, l leader.Lead) error {
	mctx, stopMover := context.WithCancel(ctx)
	moverDone := make(chan struct{})
	go func() { defer close(moverDone); a.grow.moveOut(mctx, l) }()
	defer func() { stopMover(); <-moverDone }()

	// A task's topic decides whether it ends delivered: no poller fires
	// before the worked topics were listed (until then every topic would
	// look unworked).
	select {
	case <-a.worked.Ready():
	case <-ctx.Done():
		return nil
	}
	return a.poll(ctx, fire.Config{
		Worked:       a.worked.Worked,
		Store:        a.store,
		Producer:     a.kafka,
		Shard:        l.Shard,
		Token:        l.Token,
		Batch:        a.cfg.FireBatch,
		Lease:        a.cfg.Lease,
		IdlePoll:     a.cfg.IdlePoll,
		Ahead:        a.cfg.FireAhead,
		DefaultTopic: a.cfg.DefaultTopic,
		DeadTopic:    a.cfg.DeadTopic,
		Wake:         a.wakes.Mailbox(l.Shard),
		Stop:         l.Stop,
		ValidUntil:   l.ValidUntil,
		PoisonGrace:  a.cfg.PoisonGrace,
		Outcomes:     a.outcomes,
		// delivered outcome records only when asked (DQ_OUTCOMES_DELIVERED)
		DeliveredOutcomes: a.cfg.OutcomesDelivered,
		Metrics:           a.fm,
		Log:               a.log,
	})
}

// runPoller runs a poller of cfg until it returns.
func runPoller(ctx context.Context, cfg fire.Config) error { return fire.NewPoller(cfg).Run(ctx) }

// Run runs the process until ctx ends, then shuts down in this order:
//  1. stop taking work: every poller finishes the batch in hand (produce,
//     then ack) and returns;
//  2. resign every shard and the scheduler leadership (a pass in hand is
//     cancelled: every step of a pass is idempotent), so that other
//     processes take over at once, and
//     revoke the etcd session (leader.Manager does 1 and 2, bounded by
//     the shutdown timeout);
//  3. close the outcome publisher (what is queued is written for at most
//     5s), stop the wake-up subscriber and the HTTP server;
//  4. close the Kafka writer, then the etcd and Redis clients.
func (a *App) Run(ctx context.Context) error {
	defer a.closeClients()
	a.log.Info("event process starting", "process_id", a.cfg.ProcessID, "http", a.Addr())
	g, gctx := errgroup.WithContext(ctx)
	// The subscriber and the HTTP server outlive the manager's shutdown
	// (readiness and metrics stay visible while shards are handed over).
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	bgErr := make(chan error, 3) // the topic check only ends with bg
	wg.Go(func() { bgErr <- a.wakes.Run(bg) })
	wg.Go(func() {
		// the pollers read it until they stopped: it ends with bg
		if err := a.worked.Run(bg); err != nil {
			bgErr <- fmt.Errorf("worked topics: %w", err)
		}
	})
	wg.Go(func() { _ = a.topics.Run(bg) })
	wg.Go(func() { bgErr <- a.srv.Run(bg) })
	g.Go(func() error { return a.mgr.Run(gctx) })
	if a.sched != nil {
		// resigns and revokes its own session when gctx ends
		g.Go(func() error { return a.sched.Run(gctx) })
	}
	wg.Go(func() { a.grow.follow(bg) })
	wg.Go(func() { _ = a.procs.Run(bg) }) // unregisters once the shards are handed over
	g.Go(func() error {
		select {
		case err := <-bgErr:
			if err == nil {
				err = errors.New("stopped unexpectedly")
			}
			return fmt.Errorf("background component: %w", err)
		case <-gctx.Done():
			return nil
		}
	})
	err := g.Wait()
	// the pollers stopped: no outcome comes any more; what is queued is
	// written for at most outcomeDrain
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeDrain)
	if cerr := a.outcomes.Close(octx); cerr != nil {
		a.log.Warn("close outcome publisher", "err", cerr)
	}
	cancel()
	stopBG()
	wg.Wait()
	a.log.Info("event process stopped")
	return err
}

// outcomeDrain bounds how long shutdown waits for queued outcome records.
const outcomeDrain = 5 * time.Second

func (a *App) closeClients() {
	if a.kafka != nil {
		if err := a.kafka.Close(); err != nil {
			a.log.Warn("close kafka writer", "err", err)
		}
	}
	if a.etcd != nil {
		_ = a.etcd.Close()
	}
	_ = a.rdb.Close()
}

// Run is the event binary: parse and validate the configuration, log it,
// build the app and run it until ctx ends.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, b, err := ParseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log := cfg.Logger("event")
	log.Info("configuration", b.LogAttrs()...)
	app, err := New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return app.Run(ctx)
}
