package config_test

import (
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/devcert"
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
