package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/testenv"
)

// TestRedisClientSecured runs RedisClient against a redis-server on TLS
// only with client certificates required and an ACL user: the right
// settings connect; each wrong one fails with an error that names Redis'
// address where the handshake failed, counts as Redis unavailable (the
// daemon journals) and as a misconfiguration (/readyz says so).
func TestRedisClientSecured(t *testing.T) {
	pki := testenv.NewPKI(t)
	srv := testenv.StartRedis(t, testenv.RedisOptions{TLS: pki,
		Users: []testenv.RedisUser{{Name: "dq", Password: "pw", Rules: []string{"~*", "+@all"}}}})
	other, err := devcert.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	op, err := other.Client("dq")
	if err != nil {
		t.Fatal(err)
	}
	of, err := other.Write(t.TempDir(), "other", op)
	if err != nil {
		t.Fatal(err)
	}
	good := config.TLSFiles{CA: pki.Client.CA, Cert: pki.Client.Cert, Key: pki.Client.Key}
	at := "talking to redis at " + srv.Addr
	for _, tc := range []struct {
		name     string
		user, pw string
		tls      config.TLSFiles
		want     string // "" = connects
	}{
		{"right settings", "dq", "pw", good, ""},
		{"wrong password", "dq", "nope", good, "WRONGPASS"},
		// the server's alert, or its reset when it closes first
		{"no client certificate", "dq", "pw", config.TLSFiles{CA: pki.Client.CA}, at},
		{"another CA", "dq", "pw", config.TLSFiles{CA: of.CA, Cert: pki.Client.Cert, Key: pki.Client.Key}, "x509: certificate signed by unknown authority " + at},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Common{RedisAddrs: []string{srv.Addr}, RedisUsername: tc.user, RedisPassword: tc.pw, RedisTLS: tc.tls}
			rdb, err := c.RedisClient()
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			err = rdb.Ping(t.Context()).Err()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ping: %v", err)
			case tc.want == "":
				return
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("ping: %v; want an error with %q", err, tc.want)
			}
			if !redisstore.IsUnavailable(err) {
				t.Errorf("%v: not taken for Redis unavailable: a schedule would not be journaled", err)
			}
			if strings.Contains(err.Error(), "tls:") != config.Misconfigured(err) && !strings.Contains(err.Error(), "WRONGPASS") {
				t.Errorf("%v: not taken for a misconfiguration", err)
			}
		})
	}
}

// TestValidateNamesTheSetting: a bad TLS file fails Validate with the
// variable at fault.
func TestValidateNamesTheSetting(t *testing.T) {
	pki := testenv.NewPKI(t)
	other := testenv.NewPKI(t)
	base := func() config.Common {
		return config.Common{Namespace: "dq", RedisAddrs: []string{"x:1"}, Shards: 1, Retention: 1e9, LogLevel: "info", LogFormat: "json"}
	}
	for _, tc := range []struct {
		name string
		set  func(c *config.Common)
		want string
	}{
		{"missing CA", func(c *config.Common) { c.RedisTLS.CA = "/nonexistent/ca.pem" }, "DQ_REDIS_TLS_CA: open /nonexistent/ca.pem"},
		{"CA not PEM", func(c *config.Common) { c.RedisTLS.CA = pki.Client.Key }, "DQ_REDIS_TLS_CA: " + pki.Client.Key + ": no PEM certificate in it"},
		{"key of another cert", func(c *config.Common) {
			c.RedisTLS.Cert, c.RedisTLS.Key = pki.Client.Cert, other.Client.Key
		}, "DQ_REDIS_TLS_KEY " + other.Client.Key + ": the key does not match the certificate of DQ_REDIS_TLS_CERT"},
		{"cert without key", func(c *config.Common) { c.RedisTLS.Cert = pki.Client.Cert }, "DQ_REDIS_TLS_CERT: set with DQ_REDIS_TLS_KEY"},
		{"user without password", func(c *config.Common) { c.RedisUsername = "dq" }, "DQ_REDIS_USERNAME: set with DQ_REDIS_PASSWORD"},
		{"http key of another cert", func(c *config.Common) {
			c.HTTPTLS = config.ServerFiles{Cert: pki.Server.Cert, Key: other.Server.Key}
		}, "the key does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			bindNames(&c)
			tc.set(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v; want %q", err, tc.want)
			}
		})
	}
}

// bindNames gives c's TLS settings their variable names, as Bind does.
func bindNames(c *config.Common) {
	b := config.NewBinder("t")
	c.BindCommon(b, ":0")
}

// TestKafkaConnSecured: the Transport (writers, topic admin) and the
// Dialer (readers) of config.Kafka speak TLS and each SASL mechanism to a
// Kafka-protocol broker on TLS with SASL users; a wrong password is
// refused.
func TestKafkaConnSecured(t *testing.T) {
	pki := testenv.NewPKI(t)
	users := []testenv.KafkaUser{
		{Mechanism: config.SASLPlain, Name: "plain-user", Password: "p1"},
		{Mechanism: config.SASLScramSHA256, Name: "scram256-user", Password: "p2"},
		{Mechanism: config.SASLScramSHA512, Name: "scram512-user", Password: "p3"},
	}
	k := testenv.StartKafkaWith(t, testenv.KafkaOptions{Partitions: 1, Topics: []string{"t"}, TLS: pki, Users: users})
	for _, u := range users {
		t.Run(u.Mechanism, func(t *testing.T) {
			kc := config.Kafka{SASLMechanism: u.Mechanism, SASLUsername: u.Name, SASLPassword: u.Password}
			kc.TLS.CA = pki.Client.CA
			conn, err := kc.Conn()
			if err != nil {
				t.Fatal(err)
			}
			tr := conn.Transport("test", 5*time.Second)
			defer tr.CloseIdleConnections()
			w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: "t", Transport: tr, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
			defer w.Close()
			val := "via " + u.Mechanism
			if err := w.WriteMessages(t.Context(), kafka.Message{Value: []byte(val)}); err != nil {
				t.Fatalf("write: %v", err)
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Brokers, Topic: "t", Partition: 0, MaxWait: 100 * time.Millisecond,
				Dialer: &kafka.Dialer{Timeout: 5 * time.Second, TLS: conn.TLS, SASLMechanism: conn.SASL}}) // as worker.Config's reader
			defer r.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if string(m.Value) == val {
					break
				}
			}

			kc.SASLPassword = "wrong"
			bad, err := kc.Conn()
			if err != nil {
				t.Fatal(err)
			}
			btr := bad.Transport("test", 2*time.Second)
			defer btr.CloseIdleConnections()
			bw := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: "t", Transport: btr, BatchTimeout: time.Millisecond, MaxAttempts: 1}
			defer bw.Close()
			if err := bw.WriteMessages(t.Context(), kafka.Message{Value: []byte("x")}); err == nil {
				t.Fatal("a wrong SASL password was accepted")
			}
		})
	}
}
