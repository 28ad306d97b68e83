//go:build !dqslim

package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/cli/kfakefix"
)

// EtcdOptions configures StartEtcd.
type EtcdOptions struct {
	// Listen is the client address, host:port ("0.0.0.0:2379"; port 0
	// picks a free one).
	Listen string
	// Advertise is the client URL the member announces ("http://etcd:2379").
	// Empty: http://Listen, with an unspecified host replaced by this
	// machine's first non-loopback address.
	Advertise string
	// PeerListen is the raft peer address; a single member only needs
	// loopback. Empty: 127.0.0.1 with a free port.
	PeerListen string
	// DataDir holds the member's data; it survives restarts.
	DataDir string
	// Name is the member name.
	Name string
	// Log receives etcd's warnings and errors; nil discards them.
	Log io.Writer

	// CertFile and KeyFile, when set, serve clients over TLS only (https
	// URLs; the advertised URL defaults to https://).
	CertFile, KeyFile string
	// ClientCAFile, with CertFile, makes clients present a certificate
	// that this CA signed (client certificate authentication).
	ClientCAFile string
	// HealthListen, when set, serves /health and /metrics over plain HTTP
	// on this host:port: a container healthcheck when the client port
	// needs a client certificate.
	HealthListen string
	// RootPassword, when set, turns authentication on: user root (role
	// root) with this password, and Users. A member whose data already
	// has authentication on keeps its users as they are.
	RootPassword string
	// Users are created with RootPassword, each with a role of its own
	// name that may read and write the keys under its Prefix.
	Users []EtcdUser
}

// EtcdUser is an etcd user that StartEtcd creates: role Name, readwrite
// on the keys under Prefix ("/dq/").
type EtcdUser struct {
	Name, Password, Prefix string
}

// StartEtcd starts a single-member etcd server (go.etcd.io/etcd/server/v3/embed)
// and waits until it serves clients. Close the result to stop it.
func StartEtcd(ctx context.Context, o EtcdOptions) (*embed.Etcd, error) {
	lc, lp, err := o.resolve()
	if err != nil {
		return nil, err
	}
	cfg, err := etcdConfig(o, lc, lp)
	if err != nil {
		return nil, err
	}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	if err := waitEtcd(ctx, srv, o); err != nil {
		srv.Close()
		return nil, err
	}
	return srv, nil
}

// resolve fills o's defaults, checks it and resolves its client and peer
// listen addresses.
func (o *EtcdOptions) resolve() (client, peer string, err error) {
	if o.Name == "" {
		o.Name = "dq"
	}
	if o.DataDir == "" {
		return "", "", errors.New("etcd: data dir is required")
	}
	if o.PeerListen == "" {
		o.PeerListen = "127.0.0.1:0"
	}
	if client, err = resolveListen(o.Listen); err != nil {
		return "", "", fmt.Errorf("etcd listen %q: %w", o.Listen, err)
	}
	if peer, err = resolveListen(o.PeerListen); err != nil {
		return "", "", fmt.Errorf("etcd peer listen %q: %w", o.PeerListen, err)
	}
	switch {
	case len(o.Users) > 0 && o.RootPassword == "":
		return "", "", errors.New("etcd: users need a root password (authentication on)")
	case (o.CertFile == "") != (o.KeyFile == ""):
		return "", "", errors.New("etcd: a TLS certificate needs its key, and a key its certificate")
	case o.ClientCAFile != "" && o.CertFile == "":
		return "", "", errors.New("etcd: client certificate authentication (a client CA) needs TLS (a certificate and key)")
	}
	return client, peer, nil
}

// etcdConfig is the member's configuration: its client URL lc (TLS with a
// certificate), the peer URL lp, the advertised URLs, the optional health
// listener and the logger.
func etcdConfig(o EtcdOptions, lc, lp string) (*embed.Config, error) {
	scheme := "http"
	if o.CertFile != "" {
		scheme = "https"
	}
	adv := o.Advertise
	if adv == "" {
		host, port, _ := net.SplitHostPort(lc)
		adv = scheme + "://" + net.JoinHostPort(advertiseHost(host), port)
	}
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.DataDir
	// bcrypt's cheapest cost (bcrypt.MinCost): a development etcd's
	// passwords are throwaway, and at the default cost (10) every login
	// takes ~50 ms of CPU — with three processes logging in at once on a
	// busy machine (dq dev --tls in CI), long enough to run past the
	// clients' 5 s dial timeout
	cfg.BcryptCost = 4
	var err error
	if cfg.ListenClientUrls, err = oneURL(scheme + "://" + lc); err != nil {
		return nil, err
	}
	if o.CertFile != "" {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       o.CertFile,
			KeyFile:        o.KeyFile,
			TrustedCAFile:  o.ClientCAFile,
			ClientCertAuth: o.ClientCAFile != "",
		}
	}
	if o.HealthListen != "" {
		hl, err := resolveListen(o.HealthListen)
		if err != nil {
			return nil, fmt.Errorf("etcd health listen %q: %w", o.HealthListen, err)
		}
		if cfg.ListenMetricsUrls, err = oneURL("http://" + hl); err != nil {
			return nil, err
		}
	}
	if cfg.AdvertiseClientUrls, err = oneURL(adv); err != nil {
		return nil, fmt.Errorf("etcd advertise %q: %w", adv, err)
	}
	if cfg.ListenPeerUrls, err = oneURL("http://" + lp); err != nil {
		return nil, err
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = o.Name + "=http://" + lp
	cfg.InitialClusterToken = "dq-dev-" + o.Name
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = etcdLogger(o.Log)
	return cfg, nil
}

// oneURL is raw as a list of one URL.
func oneURL(raw string) ([]url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	return []url.URL{*u}, nil
}

// etcdLogger writes etcd's warnings and errors to out (nil: discarded).
func etcdLogger(out io.Writer) func(*embed.Config) error {
	if out == nil {
		out = io.Discard
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(enc),
		zapcore.AddSync(out),
		zap.WarnLevel,
	)))
}

// waitEtcd waits until srv serves clients (at most 30s), then sets up
// authentication when o asks for it.
func waitEtcd(ctx context.Context, srv *embed.Etcd, o EtcdOptions) error {
	select {
	case <-srv.Server.ReadyNotify():
		if o.RootPassword == "" {
			return nil
		}
		return setupEtcdAuth(ctx, srv, o)
	case err := <-srv.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(30 * time.Second):
		return errors.New("etcd: not ready within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// setupEtcdAuth creates user root and o.Users, each with its role, and
// turns authentication on. It talks to the member in-process (v3client: no
// socket, no certificate), which works only while authentication is off:
// a member whose data has it on already is left as it is.
func setupEtcdAuth(ctx context.Context, srv *embed.Etcd, o EtcdOptions) error {
	cl := v3client.New(srv.Server)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cl.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	for _, u := range o.Users {
		if u.Password == "" || u.Prefix == "" {
			return fmt.Errorf("etcd user %q: a password and a key prefix", u.Name)
		}
		if err := acl.GrantEtcd(ctx, cl, u.Name, u.Password, u.Prefix); err != nil {
			return err
		}
	}
	return acl.EnableEtcdAuth(ctx, cl, o.RootPassword)
}

// resolveListen replaces port 0 with a free port, so that the same address
// can be advertised before the server binds it.
func resolveListen(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// advertiseHost is host unless it is unspecified ("", 0.0.0.0, ::), then
// this machine's first non-loopback IPv4 address (in a container: its
// address on the container network, which other containers and, on Linux,
// the Docker host can reach).
func advertiseHost(host string) string {
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return host
	}
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// KafkaOptions configures StartKafka.
type KafkaOptions struct {
	// Listen is host:port to listen on ("0.0.0.0:9092"; port 0 picks one).
	Listen string
	// Advertise is the host or host:port the broker announces in metadata
	// and coordinator answers, which clients then connect to. Empty: the
	// listen host, or this machine's first non-loopback address when the
	// listen host is unspecified; the port defaults to the bound port.
	Advertise string
	// Partitions of the seeded and automatically created topics.
	Partitions int
	// Topics are created at start.
	Topics []string
	// DataDir, when set, persists the broker's state across restarts.
	DataDir string
	// Log receives the broker's warnings and errors; nil discards them.
	Log io.Writer

	// TLS, when set, serves clients over TLS only (its Certificates).
	TLS *tls.Config
	// Users, when any, turn SASL on: every client logs in as one of them.
	Users []KafkaUser
	// Superuser is added with Users (default: "admin", SCRAM-SHA-256,
	// with a random password); the broker's own health probe logs in as it.
	Superuser KafkaUser
}

// KafkaUser is a SASL user of the broker: Mechanism PLAIN, SCRAM-SHA-256
// or SCRAM-SHA-512.
type KafkaUser struct {
	Mechanism, Name, Password string
}

// KafkaBroker is a running kfake broker.
type KafkaBroker struct {
	*kfake.Cluster
	// Listen is the bound address, Advertised the one clients are told.
	Listen, Advertised string

	tls   bool
	super KafkaUser // set when SASL is on
}

// StartKafka starts a one-broker Kafka-protocol server
// (github.com/twmb/franz-go/pkg/kfake). Close it to stop it.
//
// kfake always listens on 127.0.0.1 and announces its listener's address
// to clients; it has no option for a separate advertised address. Its
// ListenFn option (a replacement for net.Listen) is the way around both:
// ours binds o.Listen instead of the address kfake asks for, and returns a
// listener whose Addr() reports the advertised address, which is what kfake
// puts in Metadata and FindCoordinator answers.
func StartKafka(o KafkaOptions) (*KafkaBroker, error) {
	host, port, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("kafka listen %q: %w", o.Listen, err)
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("kafka listen %q: port: %w", o.Listen, err)
	}
	advHost, advPort := o.Advertise, ""
	if h, p, err := net.SplitHostPort(o.Advertise); err == nil {
		advHost, advPort = h, p
	}
	if advHost == "" {
		advHost = advertiseHost(host)
	}
	var advertised, bound string
	listen := func(network, _ string) (net.Listener, error) {
		ln, err := net.Listen(network, net.JoinHostPort(host, port))
		if err != nil {
			return nil, err
		}
		bound = ln.Addr().String()
		p := advPort
		if p == "" {
			p = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		}
		advertised = net.JoinHostPort(advHost, p)
		return advertisedListener{Listener: ln, addr: tcpAddrString(advertised)}, nil
	}
	if o.Partitions < 1 {
		o.Partitions = 4
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(portNum),
		kfake.ListenFn(listen),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(o.Partitions),
	}
	if len(o.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(o.Partitions), o.Topics...))
	}
	if o.DataDir != "" {
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	if o.Log != nil {
		opts = append(opts, kfake.WithLogger(kfake.BasicLogger(o.Log, kfake.LogLevelWarn)))
	}
	if o.TLS != nil {
		opts = append(opts, kfake.TLS(o.TLS))
	}
	var super KafkaUser
	if len(o.Users) > 0 {
		super = o.Superuser
		if super.Name == "" {
			super = KafkaUser{Mechanism: "SCRAM-SHA-256", Name: "admin", Password: randomSecret()}
		}
		for _, u := range append([]KafkaUser{super}, o.Users...) {
			if err := u.check(); err != nil {
				return nil, err
			}
		}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(super.Mechanism, super.Name, super.Password))
		for _, u := range o.Users {
			opts = append(opts, kfake.User(u.Mechanism, u.Name, u.Password))
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	kfakefix.Install(c) // the consumer-group livelock, see the package
	return &KafkaBroker{Cluster: c, Listen: bound, Advertised: advertised, tls: o.TLS != nil, super: super}, nil
}

func (u KafkaUser) check() error {
	switch u.Mechanism {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("kafka user %q: mechanism %q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", u.Name, u.Mechanism)
	}
	if u.Name == "" || u.Password == "" {
		return fmt.Errorf("kafka user %q (%s): a name and a password", u.Name, u.Mechanism)
	}
	return nil
}

// kgoOpts are the franz-go options that log in as u.
func (u KafkaUser) kgoOpts() []kgo.Opt {
	switch u.Mechanism {
	case "":
		return nil
	case "PLAIN":
		return []kgo.Opt{kgo.SASL(plain.Auth{User: u.Name, Pass: u.Password}.AsMechanism())}
	case "SCRAM-SHA-512":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism())}
	default:
		return []kgo.Opt{kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha256Mechanism())}
	}
}

// Ping checks the broker from inside: a client of its own bound address
// (over loopback when it listens on every interface), with TLS when it
// serves TLS and logged in as the superuser when SASL is on. The TLS
// certificate is not verified: the probe is of the broker's own listener,
// not of who it claims to be.
func (k *KafkaBroker) Ping(ctx context.Context) error {
	addr := k.Listen
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	opts := k.super.kgoOpts()
	if k.tls {
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true})) //nolint:gosec // G402: probes its own listener, see the comment
	}
	return probeKafkaWith(ctx, addr, opts...)
}

// randomSecret is a random password: 32 hex digits.
func randomSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b)
}

// advertisedListener is a listener that reports another address.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

type tcpAddrString string

func (tcpAddrString) Network() string  { return "tcp" }
func (a tcpAddrString) String() string { return string(a) }

// probeKafka asks the broker at addr for its API versions.
func probeKafka(ctx context.Context, addr string) error {
	return probeKafkaWith(ctx, addr)
}

// probeKafkaWith asks the broker at addr for its API versions, with more
// client options (TLS, SASL: the connection logs in before it asks).
func probeKafkaWith(ctx context.Context, addr string, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.MetadataMinAge(time.Second)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Ping(ctx)
}
