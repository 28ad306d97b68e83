package config

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Kafka are the connection settings of every Kafka client of a binary
// (the event process' writer and topic admin, the work process' reader,
// dead-letter writer and topic admin): TLS and SASL.
type Kafka struct {
	TLS           TLSFiles
	SASLMechanism string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; empty: no SASL
	SASLUsername  string
	SASLPassword  string
}

// SASL mechanisms delayq speaks.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// BindKafka registers the Kafka connection settings.
func (k *Kafka) BindKafka(b *Binder) {
	b.TLS(&k.TLS, "kafka", "DQ_KAFKA", "the Kafka brokers", true, true)
	b.String(&k.SASLMechanism, "kafka-sasl-mechanism", "DQ_KAFKA_SASL_MECHANISM", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL; use TLS with PLAIN)")
	b.String(&k.SASLUsername, "kafka-sasl-username", "DQ_KAFKA_SASL_USERNAME", "", "SASL user name")
	b.Secret(&k.SASLPassword, "kafka-sasl-password", "DQ_KAFKA_SASL_PASSWORD", "", "SASL password")
}

// CheckBrokers refuses credentials inside a broker address (CheckAddrs):
// every binary binds its own broker list (DQ_KAFKA_BROKERS), and each
// validates it here.
func CheckBrokers(brokers []string) error {
	return CheckAddrs("kafka-brokers", "DQ_KAFKA_BROKERS", "DQ_KAFKA_SASL_USERNAME and DQ_KAFKA_SASL_PASSWORD", brokers)
}

// Validate loads what the settings name: every error names the variable.
func (k Kafka) Validate() error {
	if _, err := k.TLS.Client(); err != nil {
		return err
	}
	_, err := k.Mechanism()
	return err
}

// Mechanism is the SASL mechanism of the settings, nil without SASL.
func (k Kafka) Mechanism() (sasl.Mechanism, error) {
	if k.SASLMechanism == "" {
		if k.SASLUsername != "" || k.SASLPassword != "" {
			return nil, fmt.Errorf("DQ_KAFKA_SASL_MECHANISM: set it (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) with DQ_KAFKA_SASL_USERNAME and DQ_KAFKA_SASL_PASSWORD")
		}
		return nil, nil
	}
	if k.SASLUsername == "" || k.SASLPassword == "" {
		return nil, fmt.Errorf("DQ_KAFKA_SASL_MECHANISM %s: set DQ_KAFKA_SASL_USERNAME and DQ_KAFKA_SASL_PASSWORD too", k.SASLMechanism)
	}
	switch k.SASLMechanism {
	case SASLPlain:
		return plain.Mechanism{Username: k.SASLUsername, Password: k.SASLPassword}, nil
	case SASLScramSHA256, SASLScramSHA512:
		algo := scram.SHA256
		if k.SASLMechanism == SASLScramSHA512 {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, k.SASLUsername, k.SASLPassword)
		if err != nil {
			return nil, fmt.Errorf("DQ_KAFKA_SASL_USERNAME/PASSWORD: %w", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("DQ_KAFKA_SASL_MECHANISM %q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.SASLMechanism)
}

// Conn is what a kafka-go Transport or Dialer needs: TLS (nil: plain
// TCP) and SASL (nil: none). The worker's reader takes them as
// worker.Config.KafkaTLS and KafkaSASL.
type Conn struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
}

// Conn loads the settings (Validate's errors).
func (k Kafka) Conn() (Conn, error) {
	t, err := k.TLS.Client()
	if err != nil {
		return Conn{}, err
	}
	m, err := k.Mechanism()
	if err != nil {
		return Conn{}, err
	}
	return Conn{TLS: t, SASL: m}, nil
}

// Transport is a kafka-go Transport (writers, admin clients) with TLS and
// SASL.
func (c Conn) Transport(clientID string, dialTimeout time.Duration) *kafka.Transport {
	return &kafka.Transport{
		DialTimeout: dialTimeout,
		IdleTimeout: 30 * time.Second,
		ClientID:    clientID,
		TLS:         c.TLS,
		SASL:        c.SASL,
	}
}
