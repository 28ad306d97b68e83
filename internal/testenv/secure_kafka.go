package testenv

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaSuperuser and KafkaSuperuserPassword are the SCRAM-SHA-256
// superuser that StartKafkaWith adds whenever SASL is on; Opts, Client,
// CreateTopic and KafkaGoTransport log in as it. Superusers bypass ACLs.
const (
	KafkaSuperuser         = "admin"
	KafkaSuperuserPassword = "admin-secret"
)

// KafkaOptions configures StartKafkaWith.
type KafkaOptions struct {
	// Partitions of the seeded and automatically created topics; 0 means 4.
	Partitions int32
	// Topics are created at start.
	Topics []string
	// TLS serves the broker on TLS only with the PKI's server certificate.
	// Client certificates are verified when given but not required: SASL
	// authenticates.
	TLS *PKI
	// Users turns SASL on with these users next to the superuser
	// (KafkaSuperuser).
	Users []KafkaUser
	// ACLs turns kfake's ACL checks on (kfake.EnableACLs) and seeds these
	// entries. kfake seeds ACLs only per user, so each Principal must be
	// "User:<name>" of one of Users; "User:*" is not supported (create such
	// entries with a CreateACLs request as the superuser). Without a
	// matching ACL a user may do nothing.
	ACLs []kfake.ACL
	// Listen, when set, makes the broker's listener instead of
	// net.Listen (kfake.ListenFn): a test's faults on the broker's
	// connections (integration/chaos). kfake puts TLS on top of it.
	Listen func(network, address string) (net.Listener, error)
}

// KafkaUser is a SASL user; Mechanism is "PLAIN", "SCRAM-SHA-256" or
// "SCRAM-SHA-512". A user may be given once per mechanism.
type KafkaUser struct {
	Mechanism, Name, Password string
}

// secure returns the kfake options for o's TLS, SASL and ACLs and records
// the options testenv's own clients need.
func (k *Kafka) secure(tb testing.TB, o KafkaOptions) []kfake.Opt {
	tb.Helper()
	var opts []kfake.Opt
	if o.TLS != nil {
		srv := o.TLS.ServerTLS(tb)
		srv.ClientAuth = tls.VerifyClientCertIfGiven
		opts = append(opts, kfake.TLS(srv))
		k.tlsConf = o.TLS.ClientTLS(tb)
	}
	if len(o.ACLs) > 0 && len(o.Users) == 0 {
		tb.Fatalf("testenv: KafkaOptions: ACLs need Users (they name their principals)")
	}
	if len(o.Users) == 0 {
		return opts
	}
	k.sasl = true
	opts = append(opts, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", KafkaSuperuser, KafkaSuperuserPassword))
	acls := make(map[string][]kfake.ACL) // by user name
	for _, a := range o.ACLs {
		name, ok := strings.CutPrefix(a.Principal, "User:")
		if !ok || !hasKafkaUser(o.Users, name) {
			tb.Fatalf("testenv: KafkaOptions: ACL principal %q is not \"User:<name>\" of one of Users", a.Principal)
		}
		acls[name] = append(acls[name], a)
	}
	for _, u := range o.Users {
		switch u.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			tb.Fatalf("testenv: KafkaUser %q: mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", u.Name, u.Mechanism)
		}
		if u.Name == KafkaSuperuser {
			tb.Fatalf("testenv: KafkaUser name %q is the superuser's", u.Name)
		}
		opts = append(opts, kfake.User(u.Mechanism, u.Name, u.Password, acls[u.Name]...))
		delete(acls, u.Name) // a user under several mechanisms: seed its ACLs once
	}
	if len(o.ACLs) > 0 {
		opts = append(opts, kfake.EnableACLs())
	}
	return opts
}

func hasKafkaUser(users []KafkaUser, name string) bool {
	for _, u := range users {
		if u.Name == name {
			return true
		}
	}
	return false
}

// Opts are the franz-go options for the broker: the seed brokers and, on a
// secured broker, TLS with the PKI's client certificate and SASL
// SCRAM-SHA-256 as the superuser. To log in as another user start from
// DialOpts instead: kgo.SASL appends mechanisms, and the superuser's, tried
// first, would win.
func (k *Kafka) Opts() []kgo.Opt {
	opts := k.DialOpts()
	if k.sasl {
		opts = append(opts, kgo.SASL(scram.Auth{User: KafkaSuperuser, Pass: KafkaSuperuserPassword}.AsSha256Mechanism()))
	}
	return opts
}

// DialOpts are the seed brokers and, with KafkaOptions.TLS, TLS with the
// PKI's client certificate: Opts without SASL.
func (k *Kafka) DialOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.tlsConf != nil {
		opts = append(opts, kgo.DialTLSConfig(k.tlsConf))
	}
	return opts
}
