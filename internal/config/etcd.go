package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// Etcd are the etcd connection settings of a binary: endpoints, TLS
// (a CA turns it on; a certificate and key add client certificate
// authentication) and an etcd user.
type Etcd struct {
	EtcdEndpoints []string
	EtcdTLS       TLSFiles
	EtcdUsername  string
	EtcdPassword  string
}

// BindEtcd registers the etcd settings; usage says what the binary keeps
// there.
func (e *Etcd) BindEtcd(b *Binder, usage string) {
	b.List(&e.EtcdEndpoints, "etcd-endpoints", "DQ_ETCD_ENDPOINTS", "127.0.0.1:2379", usage)
	b.TLS(&e.EtcdTLS, "etcd", "DQ_ETCD", "etcd", false, false)
	b.String(&e.EtcdUsername, "etcd-username", "DQ_ETCD_USERNAME", "", "etcd user (auth enabled; empty: none, or the client certificate's name)")
	b.Secret(&e.EtcdPassword, "etcd-password", "DQ_ETCD_PASSWORD", "", "etcd user's password")
}

// ValidateEtcd loads the TLS files and checks the user settings; every
// error names the variable.
func (e Etcd) ValidateEtcd() error {
	if err := CheckAddrs("etcd-endpoints", "DQ_ETCD_ENDPOINTS", "DQ_ETCD_USERNAME and DQ_ETCD_PASSWORD", e.EtcdEndpoints); err != nil {
		return err
	}
	if (e.EtcdUsername == "") != (e.EtcdPassword == "") {
		return errors.New("DQ_ETCD_USERNAME and DQ_ETCD_PASSWORD: set both or neither")
	}
	_, err := e.EtcdTLS.Client()
	return err
}

// EtcdClient is the etcd client of every binary (the event process'
// leadership, the daemon's and the worker's rate-limit rules, the shard
// map), built with the same settings everywhere; ctx bounds only the
// diagnosis of a failed start. It connects lazily: etcd
// need not be up yet, and requests wait for it. The caller closes it.
func (e Etcd) EtcdClient(ctx context.Context) (*clientv3.Client, error) {
	cfg := etcdConfig(e.EtcdEndpoints)
	t, err := e.EtcdTLS.Client()
	if err != nil {
		return nil, err
	}
	cfg.TLS = t
	cfg.Username, cfg.Password = e.EtcdUsername, e.EtcdPassword
	cli, err := clientv3.New(cfg)
	if err != nil && t != nil {
		// with a user, New logs in and so needs etcd; a failed TLS
		// handshake only shows as a timeout: say why
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if perr := e.ProbeEtcd(ctx); perr != nil {
			return nil, fmt.Errorf("%w: %w", err, perr)
		}
	}
	return cli, err
}

// EtcdReachable reports whether some etcd endpoint accepts a TCP
// connection within timeout (or ctx ended): whether etcd is there at all,
// whatever it then answers.
func (e Etcd) EtcdReachable(ctx context.Context, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	for _, ep := range e.EtcdEndpoints {
		if c, err := d.DialContext(ctx, "tcp", endpointAddr(ep)); err == nil {
			_ = c.Close()
			return true
		}
	}
	return ctx.Err() != nil
}

// endpointAddr is the host:port of an etcd endpoint (a URL or host:port).
func endpointAddr(ep string) string {
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}

// ProbeEtcd dials the endpoints with the TLS settings and reports the
// first failed handshake, naming the endpoint: etcd's client retries such
// a failure silently, and its requests only time out. Nil without TLS or
// when a handshake succeeds.
func (e Etcd) ProbeEtcd(ctx context.Context) error {
	t, err := e.EtcdTLS.Client()
	if err != nil || t == nil {
		return err
	}
	var first error
	for _, ep := range e.EtcdEndpoints {
		addr := endpointAddr(ep)
		t = t.Clone()
		t.NextProtos = []string{"h2"} // gRPC servers refuse a handshake without it
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: t}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := d.DialContext(cctx, "tcp", addr)
		cancel()
		if err == nil {
			// TLS 1.3: a refused client certificate shows on the first read
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			_, err = conn.Read(make([]byte, 1))
			_ = conn.Close()
			var ne net.Error
			if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
				return nil
			}
		}
		if first == nil {
			first = &ConnError{Service: "etcd", Addr: addr, Err: err}
		}
	}
	return first
}

// etcdReconnect is the gRPC reconnect backoff of the etcd client. gRPC's
// own grows to 120s; after an etcd outage the event process' session and
// the rules watches must come back within a second or so.
var etcdReconnect = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: time.Second,
}

// etcdConfig are the settings of EtcdClient; the etcd client's zap logs
// are discarded (its errors reach us as request errors).
func etcdConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(etcdReconnect)},
	}
}
