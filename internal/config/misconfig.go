package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
)

// Misconfigured reports whether err says that a dependency refused us
// for who we are or how we connect, not that it is down: a TLS handshake
// that failed (unknown CA, wrong host name, a client certificate missing
// or refused), a login refused (Redis WRONGPASS/NOAUTH, etcd
// authentication, Kafka SASL) or a permission missing (Redis NOPERM,
// etcd permission denied, Kafka authorization). Such an error does not
// heal by waiting: /readyz says not ready and names it, and the data
// stays where it is (the daemon's journal, Redis) until the setting is
// fixed.
func Misconfigured(err error) bool {
	if err == nil {
		return false
	}
	var (
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		cve *tls.CertificateVerificationError
		rhe tls.RecordHeaderError
		ae  tls.AlertError
	)
	if errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &cve) ||
		errors.As(err, &rhe) || errors.As(err, &ae) {
		return true
	}
	msg := err.Error()
	for _, s := range misconfigMarks {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// misconfigMarks are texts of the refusals above as the clients report
// them (gRPC statuses, Redis error replies, kafka-go error texts, TLS
// alerts that arrive as a net.OpError "remote error").
var misconfigMarks = []string{
	"remote error: tls:", "tls: first record does not look like a TLS handshake", "x509:",
	"WRONGPASS", "NOAUTH", "NOPERM",
	"authentication failed", "permission denied", "invalid auth token",
	"SASL", "Authentication Failed", "Authorization Failed", "Unsupported SASL Mechanism", "Illegal SASL State",
}
