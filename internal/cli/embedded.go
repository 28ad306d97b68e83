//go:build !dqslim

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/delayq/delayq/internal/kfakefix"
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
}

// StartEtcd starts a single-member etcd server (go.etcd.io/etcd/server/v3/embed)
// and waits until it serves clients. Close the result to stop it.
func StartEtcd(ctx context.Context, o EtcdOptions) (*embed.Etcd, error) {
	if o.Name == "" {
		o.Name = "dq"
	}
	if o.DataDir == "" {
		return nil, errors.New("etcd: data dir is required")
	}
	if o.PeerListen == "" {
		o.PeerListen = "127.0.0.1:0"
	}
	lc, err := resolveListen(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("etcd listen %q: %w", o.Listen, err)
	}
	lp, err := resolveListen(o.PeerListen)
	if err != nil {
		return nil, fmt.Errorf("etcd peer listen %q: %w", o.PeerListen, err)
	}
	adv := o.Advertise
	if adv == "" {
		host, port, _ := net.SplitHostPort(lc)
		adv = "http://" + net.JoinHostPort(advertiseHost(host), port)
	}
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.DataDir
	urls := func(raw string) ([]url.URL, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		return []url.URL{*u}, nil
	}
	if cfg.ListenClientUrls, err = urls("http://" + lc); err != nil {
		return nil, err
	}
	if cfg.AdvertiseClientUrls, err = urls(adv); err != nil {
		return nil, fmt.Errorf("etcd advertise %q: %w", adv, err)
	}
	if cfg.ListenPeerUrls, err = urls("http://" + lp); err != nil {
		return nil, err
	}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = o.Name + "=http://" + lp
	cfg.InitialClusterToken = "dq-dev-" + o.Name
	cfg.Logger = "zap"
	out := o.Log
	if out == nil {
		out = io.Discard
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(enc),
		zapcore.AddSync(out),
		zap.WarnLevel,
	)))
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
		return srv, nil
	case err := <-srv.Err():
		srv.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(30 * time.Second):
		srv.Close()
		return nil, errors.New("etcd: not ready within 30s")
	case <-ctx.Done():
		srv.Close()
		return nil, ctx.Err()
	}
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
}

// KafkaBroker is a running kfake broker.
type KafkaBroker struct {
	*kfake.Cluster
	// Listen is the bound address, Advertised the one clients are told.
	Listen, Advertised string
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
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	kfakefix.Install(c) // the consumer-group livelock, see the package
	return &KafkaBroker{Cluster: c, Listen: bound, Advertised: advertised}, nil
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MetadataMinAge(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Ping(ctx)
}
