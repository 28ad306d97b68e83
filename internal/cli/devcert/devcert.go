// Package devcert makes throwaway X.509 certificates: a private CA and the
// server and client certificates it signs. `dq dev --tls`, the compose TLS
// override's init and the tests use it to run Redis, etcd, Kafka and the
// delayq binaries on TLS without any certificate of a real CA. Never use
// its output in production: keys live in memory and files unencrypted.
package devcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity of every certificate made here: long enough for a dev session
// or a test run, short enough that a leaked one is soon worthless.
const validity = 30 * 24 * time.Hour

// CA is a private certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// Pair is a certificate (PEM, the leaf only) and its private key (PEM,
// PKCS #8).
type Pair struct {
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devcert: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"delayq dev"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devcert: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devcert: CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// Pool is a certificate pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server makes a certificate for the given host names and IP addresses
// (as strings, e.g. "localhost", "127.0.0.1", "redis"). It is good for
// client authentication too, as Redis Cluster nodes and etcd peers present
// their server certificate to each other.
func (ca *CA) Server(hosts ...string) (Pair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "delayq dev server"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.Subject.CommonName = hosts[0]
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.sign(tmpl)
}

// Client makes a client certificate with the given common name (etcd
// takes it as the user name when client certificate auth is on).
func (ca *CA) Client(commonName string) (Pair, error) {
	return ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) sign(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: key: %w", err)
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: key: %w", err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}),
	}, nil
}

// TLSCertificate is the pair as crypto/tls uses it.
func (p Pair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(p.CertPEM, p.KeyPEM)
}

// Files are the paths of a written CA certificate, certificate and key.
type Files struct {
	CA, Cert, Key string
}

// Write writes the CA certificate and the pair into dir as <name>.crt and
// <name>.key (and ca.crt), the key readable by its owner only.
func (ca *CA) Write(dir, name string, p Pair) (Files, error) {
	f := Files{
		CA:   filepath.Join(dir, "ca.crt"),
		Cert: filepath.Join(dir, name+".crt"),
		Key:  filepath.Join(dir, name+".key"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, fmt.Errorf("devcert: %w", err)
	}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.CertPEM, 0o644}, {f.Cert, p.CertPEM, 0o644}, {f.Key, p.KeyPEM, 0o600}} {
		if err := os.WriteFile(w.path, w.data, w.mode); err != nil {
			return f, fmt.Errorf("devcert: %w", err)
		}
	}
	return f, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Set is a CA with a server and a client certificate, written as files.
type Set struct {
	CA                     *CA
	Server, Client         Files // server.crt/.key, client.crt/.key; each with ca.crt
	ServerPair, ClientPair Pair
}

// WriteSet makes a CA named caName, a server certificate for hosts and a
// client certificate with common name clientCN, and writes them into dir
// as ca.crt, server.crt/.key and client.crt/.key (keys 0600).
func WriteSet(dir, caName, clientCN string, hosts ...string) (*Set, error) {
	ca, err := NewCA(caName)
	if err != nil {
		return nil, err
	}
	s := &Set{CA: ca}
	if s.ServerPair, err = ca.Server(hosts...); err != nil {
		return nil, err
	}
	if s.ClientPair, err = ca.Client(clientCN); err != nil {
		return nil, err
	}
	if s.Server, err = ca.Write(dir, "server", s.ServerPair); err != nil {
		return nil, err
	}
	if s.Client, err = ca.Write(dir, "client", s.ClientPair); err != nil {
		return nil, err
	}
	return s, nil
}
