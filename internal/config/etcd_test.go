package config

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestEtcdConfig(t *testing.T) {
	eps := []string{"10.0.0.1:2379", "10.0.0.2:2379"}
	c := etcdConfig(eps)
	if !slices.Equal(c.Endpoints, eps) {
		t.Errorf("endpoints %v, want %v", c.Endpoints, eps)
	}
	if c.DialTimeout != 5*time.Second {
		t.Errorf("dial timeout %v, want 5s", c.DialTimeout)
	}
	if c.Logger == nil || c.Logger.Core().Enabled(zap.ErrorLevel) {
		t.Error("the etcd client's zap logger is not quiet")
	}
	if len(c.DialOptions) != 1 {
		t.Errorf("%d dial options, want 1 (the reconnect backoff)", len(c.DialOptions))
	}
	b := etcdReconnect.Backoff
	if b.BaseDelay != 50*time.Millisecond || b.MaxDelay != 500*time.Millisecond || etcdReconnect.MinConnectTimeout != time.Second {
		t.Errorf("reconnect %+v, want 50ms growing to 500ms, connect timeout 1s", etcdReconnect)
	}
}

// TestEtcdClientRetriesConnectionsFast points the client at a server that
// accepts and drops every connection: EtcdClient must return at once
// (it connects lazily) and retry the connection within a fraction of a
// second, where gRPC's default backoff (1s growing to 120s) makes at most
// three attempts in four seconds.
func TestEtcdClientRetriesConnectionsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			attempts.Add(1)
			_ = c.Close()
		}
	})
	defer wg.Wait()
	defer ln.Close()

	start := time.Now()
	cli, err := Etcd{EtcdEndpoints: []string{ln.Addr().String()}}.EtcdClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("EtcdClient took %v without a server; it must connect lazily", d)
	}
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() { _, err := cli.Get(ctx, "k"); got <- err }()

	const want = 5
	deadline := time.Now().Add(4 * time.Second)
	for attempts.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	getErr := <-got
	if n := attempts.Load(); n < want {
		t.Errorf("%d connection attempts in %v, want %d (fast reconnect backoff)", n, took, want)
	} else {
		t.Logf("%d connection attempts in %v", n, took)
	}
	if !errors.Is(getErr, context.Canceled) {
		t.Errorf("get without a server: %v, want it to wait until cancelled", getErr)
	}
}
