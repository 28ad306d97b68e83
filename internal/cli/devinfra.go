//go:build !dqslim

package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/config"
)

func runDevEtcd(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev etcd", env)
	var o EtcdOptions
	var rootFile, namespace string
	var users, userFiles listFlag
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:2379", "client address host:port (0.0.0.0:2379 in a container)")
	fs.StringVar(&o.Advertise, "advertise", "", "client URL to announce (default: http://LISTEN, or https:// with --tls-cert, an unspecified host replaced by this machine's address)")
	fs.StringVar(&o.PeerListen, "peer-listen", "127.0.0.1:2380", "raft peer address (loopback is enough for one member)")
	fs.StringVar(&o.DataDir, "data-dir", "dq-etcd", "data directory (a volume in a container)")
	fs.StringVar(&o.Name, "name", "dq", "member name")
	fs.StringVar(&o.CertFile, "tls-cert", "", "server certificate file (PEM): clients connect over TLS only")
	fs.StringVar(&o.KeyFile, "tls-key", "", "private key file (PEM) of --tls-cert")
	fs.StringVar(&o.ClientCAFile, "tls-ca", "", "CA certificate file (PEM): clients must present a certificate it signed (client certificate authentication; needs --tls-cert)")
	fs.StringVar(&o.HealthListen, "health-listen", "", "also serve /health and /metrics over plain HTTP on this host:port (a container healthcheck when clients need a certificate)")
	fs.StringVar(&o.RootPassword, "root-password", "", "turn authentication on: user root with this password (kept as it is when the data already has authentication on)")
	fs.StringVar(&rootFile, "root-password-file", "", "like --root-password, read from this file")
	fs.Var(&users, "user", "NAME:PASSWORD: with authentication on, a user with role NAME that may read and write the namespace's keys (/NAMESPACE/); repeatable")
	fs.Var(&userFiles, "user-file", "NAME:FILE: like --user, the password read from FILE; repeatable")
	fs.StringVar(&namespace, "namespace", "dq", "the delayq namespace whose keys the --user roles may read and write")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if rootFile != "" {
		if o.RootPassword != "" {
			return errors.New("dev etcd: --root-password and --root-password-file: give one")
		}
		pw, err := config.ReadSecretFile(rootFile)
		if err != nil {
			return fmt.Errorf("dev etcd: --root-password-file: %w", err)
		}
		o.RootPassword = pw
	}
	for _, spec := range users {
		name, pw, ok := strings.Cut(spec, ":")
		if !ok || name == "" || pw == "" {
			return fmt.Errorf("dev etcd: --user %q: NAME:PASSWORD", spec)
		}
		o.Users = append(o.Users, EtcdUser{Name: name, Password: pw, Prefix: acl.EtcdPrefix(namespace)})
	}
	for _, spec := range userFiles {
		name, file, ok := strings.Cut(spec, ":")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("dev etcd: --user-file %q: NAME:FILE", spec)
		}
		pw, err := config.ReadSecretFile(file)
		if err != nil {
			return fmt.Errorf("dev etcd: --user-file %s: %w", name, err)
		}
		o.Users = append(o.Users, EtcdUser{Name: name, Password: pw, Prefix: acl.EtcdPrefix(namespace)})
	}
	o.Log = env.Stderr
	srv, err := StartEtcd(ctx, o)
	if err != nil {
		return err
	}
	defer srv.Close()
	var extra []string
	if o.CertFile != "" {
		extra = append(extra, "TLS")
	}
	if o.ClientCAFile != "" {
		extra = append(extra, "client certificates required")
	}
	if o.RootPassword != "" {
		extra = append(extra, fmt.Sprintf("authentication on (%d users)", len(o.Users)))
	}
	if o.HealthListen != "" {
		extra = append(extra, "health on http://"+srv.Config().ListenMetricsUrls[0].Host+"/health")
	}
	note := ""
	if len(extra) > 0 {
		note = ", " + strings.Join(extra, ", ")
	}
	fmt.Fprintf(env.Stderr, "etcd ready: listening on %s, advertising %s, data in %s%s\n",
		srv.Config().ListenClientUrls[0].Host, srv.Config().AdvertiseClientUrls[0].String(), o.DataDir, note)
	select {
	case <-ctx.Done():
		fmt.Fprintln(env.Stderr, "etcd: shutting down")
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}

// devKafkaFlags are dq dev kafka's flags besides KafkaOptions' own.
type devKafkaFlags struct {
	topics, certFile, keyFile, superuser, health string
	users, userFiles                             listFlag
}

// runDevKafka is dq dev kafka: the embedded Kafka-protocol broker alone
// (a container's), until ctx ends.
func runDevKafka(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev kafka", env)
	var o KafkaOptions
	var f devKafkaFlags
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:9092", "address host:port (0.0.0.0:9092 in a container)")
	fs.StringVar(&o.Advertise, "advertise", "", "host[:port] clients are told to connect to (default: the listen host, an unspecified one replaced by this machine's address)")
	fs.IntVar(&o.Partitions, "partitions", 4, "partitions of created topics")
	fs.StringVar(&f.topics, "topics", "dq.tasks,dq.dead", "topics to create at start (comma-separated); others are created on first use")
	fs.StringVar(&o.DataDir, "data-dir", "", "persist the broker's data here (default: in memory only)")
	fs.StringVar(&f.certFile, "tls-cert", "", "server certificate file (PEM): clients connect over TLS only")
	fs.StringVar(&f.keyFile, "tls-key", "", "private key file (PEM) of --tls-cert")
	fs.Var(&f.users, "sasl-user", "MECHANISM:USER:PASSWORD (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512): turn SASL on with this user; repeatable")
	fs.Var(&f.userFiles, "sasl-user-file", "MECHANISM:USER:FILE: like --sasl-user, the password read from FILE; repeatable")
	fs.StringVar(&f.superuser, "superuser", "", "MECHANISM:USER:PASSWORD of the superuser that SASL adds (default: admin, SCRAM-SHA-256, a random password the broker's health probe uses)")
	fs.StringVar(&f.health, "health-listen", "", "also serve GET /health over plain HTTP on this host:port, answering 200 when the broker answers its own TLS and SASL client (a container healthcheck)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	o.Topics = config.Split(f.topics)
	o.Log = env.Stderr
	if err := f.apply(&o); err != nil {
		return err
	}
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return fmt.Errorf("kafka data dir: %w", err)
		}
	}
	var healthLn net.Listener
	if f.health != "" {
		var err error
		if healthLn, err = net.Listen("tcp", f.health); err != nil {
			return fmt.Errorf("dev kafka: --health-listen: %w", err)
		}
		defer healthLn.Close()
	}
	k, err := StartKafka(o)
	if err != nil {
		return err
	}
	defer k.Close()
	fmt.Fprintf(env.Stderr, "kafka ready: listening on %s, advertising %s, topics %s (%d partitions)%s\n",
		k.Listen, k.Advertised, strings.Join(o.Topics, ","), o.Partitions, kafkaNote(o, healthLn))
	return serveDevKafka(ctx, env, k, healthLn)
}

// apply sets the broker's TLS certificate, SASL users and superuser.
func (f *devKafkaFlags) apply(o *KafkaOptions) error {
	if f.certFile != "" || f.keyFile != "" {
		cert, err := config.LoadKeyPair(f.certFile, f.keyFile, "--tls-cert", "--tls-key")
		if err != nil {
			return fmt.Errorf("dev kafka: %w", err)
		}
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	for _, spec := range f.users {
		u, err := parseKafkaUser(spec, false)
		if err != nil {
			return fmt.Errorf("dev kafka: --sasl-user: %w", err)
		}
		o.Users = append(o.Users, u)
	}
	for _, spec := range f.userFiles {
		u, err := parseKafkaUser(spec, true)
		if err != nil {
			return fmt.Errorf("dev kafka: --sasl-user-file: %w", err)
		}
		o.Users = append(o.Users, u)
	}
	if f.superuser != "" {
		if len(o.Users) == 0 {
			return errors.New("dev kafka: --superuser needs SASL on (--sasl-user or --sasl-user-file)")
		}
		u, err := parseKafkaUser(f.superuser, false)
		if err != nil {
			return fmt.Errorf("dev kafka: --superuser: %w", err)
		}
		o.Superuser = u
	}
	return nil
}

// kafkaNote is the end of the ready line: TLS, SASL, the health URL.
func kafkaNote(o KafkaOptions, healthLn net.Listener) string {
	var extra []string
	if o.TLS != nil {
		extra = append(extra, "TLS")
	}
	if len(o.Users) > 0 {
		extra = append(extra, fmt.Sprintf("SASL (%d users)", len(o.Users)))
	}
	if healthLn != nil {
		extra = append(extra, "health on http://"+healthLn.Addr().String()+"/health")
	}
	if len(extra) == 0 {
		return ""
	}
	return ", " + strings.Join(extra, ", ")
}

// serveDevKafka serves the health endpoint on healthLn (when not nil)
// until ctx ends.
func serveDevKafka(ctx context.Context, env Env, k *KafkaBroker, healthLn net.Listener) error {
	g, gctx := errgroup.WithContext(ctx)
	if healthLn != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
			pctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
			defer cancel()
			if err := k.Ping(pctx); err != nil {
				http.Error(w, "kafka: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error { return serveUntil(gctx, srv, healthLn) })
	}
	<-gctx.Done()
	fmt.Fprintln(env.Stderr, "kafka: shutting down")
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("dev kafka: health: %w", err)
	}
	return nil
}

// parseKafkaUser parses MECHANISM:USER:PASSWORD, or MECHANISM:USER:FILE
// when fromFile.
func parseKafkaUser(spec string, fromFile bool) (KafkaUser, error) {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		if fromFile {
			return KafkaUser{}, fmt.Errorf("%q: MECHANISM:USER:FILE", spec)
		}
		return KafkaUser{}, fmt.Errorf("%q: MECHANISM:USER:PASSWORD", spec)
	}
	u := KafkaUser{Mechanism: strings.ToUpper(parts[0]), Name: parts[1], Password: parts[2]}
	if fromFile {
		pw, err := config.ReadSecretFile(parts[2])
		if err != nil {
			return KafkaUser{}, fmt.Errorf("user %s: %w", u.Name, err)
		}
		u.Password = pw
	}
	return u, u.check()
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}
