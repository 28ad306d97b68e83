package testenv

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/cli/acl"
)

// EtcdOptions configures StartEtcdWith and StartEtcdClusterWith.
type EtcdOptions struct {
	// TLS serves clients on https only, with the PKI's server certificate,
	// and requires client certificates signed by its CA (ClientCertAuth).
	// Endpoints stay "127.0.0.1:port": clientv3 given a TLS config dials
	// TLS. Peers talk plain HTTP.
	TLS *PKI
	// RootPassword, when set, enables auth with the user root (role root)
	// and this password, after the users below are created.
	RootPassword string
	// Users are created before auth is enabled; they need RootPassword.
	Users []EtcdUser
}

// EtcdUser is an etcd user with a role of its own (named after the user)
// that grants readwrite on each of Prefixes (the key range [prefix,
// clientv3.GetPrefixRangeEnd(prefix))). An empty Password makes a user
// without password (etcd's --no-password): with EtcdOptions.TLS etcd then
// authenticates it by a client certificate whose common name is Name
// (PKI's client certificate has CN ClientCN, "delayq"), used for every
// request that carries no auth token.
type EtcdUser struct {
	Name, Password string
	Prefixes       []string
}

// rootUser is "root" when o enables auth.
func rootUser(o EtcdOptions) string {
	if o.RootPassword == "" {
		return ""
	}
	return "root"
}

// enableEtcdAuth creates root and o.Users and enables auth, through a
// client that does not log in (auth is still off).
func enableEtcdAuth(tb testing.TB, endpoints []string, o EtcdOptions) {
	tb.Helper()
	cl := newEtcdClient(tb, endpoints, o, "", "")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(tb.Context(), startTimeout)
	defer cancel()
	fail := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("testenv: etcd auth setup on %v: %s: %v", endpoints, what, err)
		}
	}
	for _, u := range o.Users {
		fail("grant "+u.Name, acl.GrantEtcd(ctx, cl, u.Name, u.Password, u.Prefixes...))
	}
	fail("enable auth", acl.EnableEtcdAuth(ctx, cl, o.RootPassword))
}

// ClientAs returns a clientv3 client for this server that logs in as user
// with password (no login when user is empty), over TLS with the PKI's
// client certificate when EtcdOptions.TLS is set. It is closed at cleanup.
func (e *Etcd) ClientAs(tb testing.TB, user, password string) *clientv3.Client {
	tb.Helper()
	return newEtcdClient(tb, e.Endpoints, e.opts, user, password)
}
