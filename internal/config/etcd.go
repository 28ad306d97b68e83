package config

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// EtcdClient is the etcd client of every binary (the event process'
// leadership, the daemon's and the worker's rate-limit rules), built with
// the same settings everywhere. It connects lazily: etcd need not be up
// yet, and requests wait for it. The caller closes it.
func EtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(etcdConfig(endpoints))
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
