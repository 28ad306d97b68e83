package testenv

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"testing"

	"github.com/delayq/delayq/internal/cli/devcert"
)

// PKI is a throwaway CA with a server certificate (127.0.0.1, localhost)
// and a client certificate, written as files, for starting the servers of
// this package in their secured modes (RedisOptions.TLS, EtcdOptions.TLS,
// KafkaOptions.TLS).
type PKI struct {
	CA *devcert.CA
	// Dir holds ca.crt, server.crt/.key and client.crt/.key.
	Dir string
	// Server is the server certificate and key, and the CA path. It is
	// good for client authentication too (Redis Cluster nodes present it to
	// each other on the cluster bus).
	Server devcert.Files
	// Client is the client certificate (CN "delayq") and key, and the CA
	// path.
	Client devcert.Files

	server, client devcert.Pair
}

// ClientCN is the common name of PKI's client certificate; etcd takes it
// as the user name of a request that carries no auth token.
const ClientCN = "delayq"

// NewPKI makes a CA, a server certificate for 127.0.0.1 and localhost and
// a client certificate (CN "delayq"), written under tb.TempDir().
func NewPKI(tb testing.TB) *PKI {
	tb.Helper()
	p, err := NewPKIIn(tb.TempDir())
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return p
}

// NewPKIIn is NewPKI with the files in dir, for a PKI shared by a whole
// test binary (the caller removes dir).
func NewPKIIn(dir string) (*PKI, error) {
	set, err := devcert.WriteSet(dir, "testenv CA", ClientCN, "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	return &PKI{CA: set.CA, Dir: dir, Server: set.Server, Client: set.Client, server: set.ServerPair, client: set.ClientPair}, nil
}

// ClientTLS is a new client config: RootCAs the CA, Certificates the client
// certificate. ServerName is left empty: clients fill it in from the
// address they dial ("127.0.0.1" matches the server certificate).
func (p *PKI) ClientTLS(tb testing.TB) *tls.Config {
	tb.Helper()
	cert, err := p.client.TLSCertificate()
	if err != nil {
		tb.Fatalf("testenv: client certificate: %v", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      p.CA.Pool(),
		Certificates: []tls.Certificate{cert},
	}
}

// ServerTLS is a new server config: the server certificate, ClientCAs the
// CA and client certificates required (RequireAndVerifyClientCert).
func (p *PKI) ServerTLS(tb testing.TB) *tls.Config {
	tb.Helper()
	cert, err := p.server.TLSCertificate()
	if err != nil {
		tb.Fatalf("testenv: server certificate: %v", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    p.CA.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

// randomSecret is a fresh 128-bit hex secret (testenv's own admin
// passwords).
func randomSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b)
}
