package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// TLSFiles are the TLS settings of one connection kind (Redis, Kafka,
// etcd, webhooks, the HTTP server): file paths, bound by Binder.TLS so
// that every error names the variable at fault.
//
// For a client, TLS is on when Enable is set (the system's roots) or a CA
// is given (that CA alone); Cert and Key, both or neither, add a client
// certificate. For a server, Cert and Key turn it on.
type TLSFiles struct {
	Enable     bool
	CA         string
	Cert       string
	Key        string
	ServerName string

	env string // "DQ_REDIS_TLS": the variables are env, env+"_CA", ...
}

// TLS binds the TLS settings of one connection kind: flags
// <flag>-tls, -tls-ca, -tls-cert, -tls-key and -tls-server-name, and the
// variables <env>_TLS, _TLS_CA, _TLS_CERT, _TLS_KEY, _TLS_SERVER_NAME.
// what says which connection ("Redis"). Parts that a kind does not have
// are left out: enable (the system roots switch) and serverName.
func (b *Binder) TLS(p *TLSFiles, flag, env, what string, enable, serverName bool) {
	p.env = env + "_TLS"
	if enable {
		b.Bool(&p.Enable, flag+"-tls", env+"_TLS", false, "TLS to "+what+" with the system's root CAs")
	}
	b.String(&p.CA, flag+"-tls-ca", env+"_TLS_CA", "", "CA certificate file (PEM) that signs "+what+"'s certificate; turns TLS on")
	b.String(&p.Cert, flag+"-tls-cert", env+"_TLS_CERT", "", "client certificate file (PEM) presented to "+what+" (with the key)")
	b.String(&p.Key, flag+"-tls-key", env+"_TLS_KEY", "", "private key file (PEM) of the client certificate for "+what)
	if serverName {
		b.String(&p.ServerName, flag+"-tls-server-name", env+"_TLS_SERVER_NAME", "", "name "+what+"'s certificate must carry, when not the host dialled")
	}
}

// On reports whether the settings ask for TLS.
func (t TLSFiles) On() bool { return t.Enable || t.CA != "" || t.Cert != "" || t.Key != "" }

// name is the variable of one part ("" for the switch itself).
func (t TLSFiles) name(part string) string {
	if t.env == "" {
		return "TLS" + part
	}
	return t.env + part
}

// Client is the client TLS configuration the settings ask for, nil when
// TLS is off. A file that is missing or not PEM, a key that does not
// match its certificate, a certificate without its key: an error that
// names the variable.
func (t TLSFiles) Client() (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pool, err := LoadCA(t.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.name("_CA"), err)
		}
		c.RootCAs = pool
	}
	if t.Cert != "" || t.Key != "" {
		cert, err := t.keyPair()
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// keyPair loads Cert and Key, naming the variable at fault.
func (t TLSFiles) keyPair() (tls.Certificate, error) {
	switch {
	case t.Cert == "":
		return tls.Certificate{}, fmt.Errorf("%s: set with %s (a key needs its certificate)", t.name("_KEY"), t.name("_CERT"))
	case t.Key == "":
		return tls.Certificate{}, fmt.Errorf("%s: set with %s (a certificate needs its key)", t.name("_CERT"), t.name("_KEY"))
	}
	return LoadKeyPair(t.Cert, t.Key, t.name("_CERT"), t.name("_KEY"))
}

// LoadKeyPair reads a certificate and its key, naming certVar or keyVar
// in the error: a missing file, a file without PEM, a key that is not the
// certificate's.
func LoadKeyPair(certFile, keyFile, certVar, keyVar string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", certVar, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s: %w", keyVar, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "does not match"):
			return cert, fmt.Errorf("%s %s: the key does not match the certificate of %s %s", keyVar, keyFile, certVar, certFile)
		case strings.Contains(msg, "certificate input"), strings.Contains(msg, "CERTIFICATE"):
			return cert, fmt.Errorf("%s %s: %w", certVar, certFile, err)
		default:
			return cert, fmt.Errorf("%s %s: %w", keyVar, keyFile, err)
		}
	}
	return cert, nil
}

// LoadCA reads a PEM file of one or more CA certificates into a pool.
func LoadCA(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

// ServerFiles are a TLS server's certificate and key (the HTTP API and
// admin endpoints). Both or neither.
type ServerFiles struct {
	Cert, Key string
	env       string
}

// ServerTLS binds a server's certificate and key: flags <flag>-tls-cert,
// -tls-key; variables <env>_TLS_CERT, _TLS_KEY.
func (b *Binder) ServerTLS(p *ServerFiles, flag, env, what string) {
	p.env = env + "_TLS"
	b.String(&p.Cert, flag+"-tls-cert", env+"_TLS_CERT", "", "certificate file (PEM, with its chain) of "+what+"; turns HTTPS on (reloaded on SIGHUP and when the file changes)")
	b.String(&p.Key, flag+"-tls-key", env+"_TLS_KEY", "", "private key file (PEM) of "+what+"'s certificate")
}

// On reports whether a certificate is configured.
func (s ServerFiles) On() bool { return s.Cert != "" || s.Key != "" }

// Vars are the two variables' names, for messages.
func (s ServerFiles) Vars() (cert, key string) {
	env := s.env
	if env == "" {
		env = "TLS"
	}
	return env + "_CERT", env + "_KEY"
}

// Load reads the pair, naming the variable at fault.
func (s ServerFiles) Load() (tls.Certificate, error) {
	cv, kv := s.Vars()
	switch {
	case s.Cert == "":
		return tls.Certificate{}, fmt.Errorf("%s: set with %s (a key needs its certificate)", kv, cv)
	case s.Key == "":
		return tls.Certificate{}, fmt.Errorf("%s: set with %s (a certificate needs its key)", cv, kv)
	}
	return LoadKeyPair(s.Cert, s.Key, cv, kv)
}
