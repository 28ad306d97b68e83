//go:build !dqslim

package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/testenv"
)

// exportLine is one line of dq dev --tls' settings block.
var exportLine = regexp.MustCompile(`(?m)^  export (DQ_[A-Z0-9_]+)=(\S+)$`)

// TestDevTLS: dq dev --tls runs everything on TLS with users; a task
// scheduled through the HTTPS API (trusting the printed CA) is delivered,
// and the printed settings work from another client: Redis as user
// delayq (the default user is refused, keys outside the namespace too),
// etcd as user delayq (keys outside the namespace refused), Kafka with
// SCRAM (a wrong password refused).
func TestDevTLS(t *testing.T) {
	d := startDevAll(t, devOptions{shards: 4, redis: "redis-server", tls: true})
	api, addr, out, errb, cancel, done := d.api, d.addr, &d.out, &d.errb, d.cancel, d.done
	if api != "https://"+addr {
		t.Fatalf("API %s, want https://%s", api, addr)
	}
	vars := map[string]string{}
	for _, m := range exportLine.FindAllStringSubmatch(out.String(), -1) {
		vars[m[1]] = m[2]
	}
	for _, k := range []string{"DQ_ADDR", "DQ_REDIS_ADDRS", "DQ_REDIS_USERNAME", "DQ_REDIS_PASSWORD_FILE", "DQ_REDIS_TLS_CA", "DQ_REDIS_TLS_CERT", "DQ_REDIS_TLS_KEY",
		"DQ_ETCD_ENDPOINTS", "DQ_ETCD_TLS_CA", "DQ_ETCD_TLS_CERT", "DQ_ETCD_TLS_KEY", "DQ_ETCD_USERNAME", "DQ_ETCD_PASSWORD_FILE",
		"DQ_KAFKA_BROKERS", "DQ_KAFKA_TLS_CA", "DQ_KAFKA_SASL_MECHANISM", "DQ_KAFKA_SASL_USERNAME", "DQ_KAFKA_SASL_PASSWORD_FILE"} {
		if vars[k] == "" {
			t.Errorf("the settings block lacks %s:\n%s", k, out.String())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	ca := vars["DQ_REDIS_TLS_CA"]
	if want := "dq stats --addr " + api + " --ca " + ca; !strings.Contains(out.String(), want) {
		t.Errorf("banner lacks %q:\n%s", want, out.String())
	}
	for _, k := range []string{"DQ_REDIS_PASSWORD_FILE", "DQ_ETCD_PASSWORD_FILE", "DQ_KAFKA_SASL_PASSWORD_FILE"} {
		if fi, err := os.Stat(vars[k]); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s %s: %v, mode %v; want a 0600 file", k, vars[k], err, fi)
		}
	}
	secret := func(k string) string {
		pw, err := config.ReadSecretFile(vars[k])
		if err != nil {
			t.Fatal(err)
		}
		return pw
	}
	caPool, err := config.LoadCA(ca)
	if err != nil {
		t.Fatal(err)
	}

	// The API: HTTPS only, a task delivered.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool}, DisableKeepAlives: true}}
	cl := client.New(vars["DQ_ADDR"], client.WithHTTPClient(hc))
	if _, err := cl.Schedule(t.Context(), client.Task{ID: "dev-tls-1", Type: "secure", Delay: 200 * time.Millisecond}); err != nil {
		t.Fatalf("schedule over HTTPS: %v\n%s", err, errb.String())
	}
	if _, err := client.New("http://"+addr, client.WithHTTPClient(noKeepAlive)).Stats(t.Context()); err == nil {
		t.Errorf("the API answers plain HTTP")
	}
	testenv.WaitFor(t, 30*time.Second, "the task scheduled over HTTPS is delivered", func() bool {
		return strings.Contains(out.String(), "task_id=dev-tls-1")
	})

	// Redis, with the printed settings.
	rc := config.Common{
		RedisAddrs:    []string{vars["DQ_REDIS_ADDRS"]},
		RedisUsername: vars["DQ_REDIS_USERNAME"],
		RedisPassword: secret("DQ_REDIS_PASSWORD_FILE"),
		RedisTLS:      config.TLSFiles{CA: vars["DQ_REDIS_TLS_CA"], Cert: vars["DQ_REDIS_TLS_CERT"], Key: vars["DQ_REDIS_TLS_KEY"]},
	}
	rdb, err := rc.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// delayq may read its namespace's keys (the meta hash exists once the
	// daemon ran), and nothing else: the default user is off, so a NOPERM
	// outside says who is logged in.
	if n, err := rdb.Exists(t.Context(), "dq:{dq}:meta").Result(); err != nil || n != 1 {
		t.Errorf("EXISTS dq:{dq}:meta with the printed settings: %d, %v; want 1", n, err)
	}
	if err := rdb.Set(t.Context(), "outside-the-namespace", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("SET outside the namespace: %v, want NOPERM", err)
	}
	rc.RedisUsername, rc.RedisPassword = "", ""
	anon, err := rc.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Ping(t.Context()).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING as the default user: %v, want NOAUTH", err)
	}
	if err := anon.Do(t.Context(), "AUTH", "default", "").Err(); err == nil {
		t.Errorf("AUTH default: accepted, want refused (the default user is off)")
	}

	// etcd, with the printed settings.
	ec := config.Etcd{
		EtcdEndpoints: []string{vars["DQ_ETCD_ENDPOINTS"]},
		EtcdTLS:       config.TLSFiles{CA: vars["DQ_ETCD_TLS_CA"], Cert: vars["DQ_ETCD_TLS_CERT"], Key: vars["DQ_ETCD_TLS_KEY"]},
		EtcdUsername:  vars["DQ_ETCD_USERNAME"],
		EtcdPassword:  secret("DQ_ETCD_PASSWORD_FILE"),
	}
	etcdCheck(t, ec, "/dq/dev-tls-test", "/outside")

	// Kafka, with the printed settings.
	kc := config.Kafka{
		TLS:           config.TLSFiles{CA: vars["DQ_KAFKA_TLS_CA"]},
		SASLMechanism: vars["DQ_KAFKA_SASL_MECHANISM"],
		SASLUsername:  vars["DQ_KAFKA_SASL_USERNAME"],
		SASLPassword:  secret("DQ_KAFKA_SASL_PASSWORD_FILE"),
	}
	kafkaCheck(t, vars["DQ_KAFKA_BROKERS"], kc)

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dq dev --tls: %v\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dq dev --tls did not stop within 30s of cancellation")
	}
}

// etcdCheck: a client with ec's settings may write inside and not outside
// its prefix; one without the user name is refused.
func etcdCheck(t *testing.T, ec config.Etcd, inside, outside string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	cli, err := ec.EtcdClient(ctx)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, inside, "x"); err != nil {
		t.Errorf("etcd put %s as %s: %v", inside, ec.EtcdUsername, err)
	}
	if _, err := cli.Put(ctx, outside, "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("etcd put %s as %s: %v, want permission denied", outside, ec.EtcdUsername, err)
	}
	ec.EtcdUsername, ec.EtcdPassword = "", ""
	ec.EtcdTLS.Cert, ec.EtcdTLS.Key = "", ""
	anon, err := ec.EtcdClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	defer acancel()
	if _, err := anon.Get(actx, inside); err == nil {
		t.Errorf("etcd get without a client certificate or user: no error")
	}
}

// kafkaCheck: a client with kc's settings reads the broker's metadata; one
// with a wrong password does not.
func kafkaCheck(t *testing.T, broker string, kc config.Kafka) {
	t.Helper()
	tc, err := kc.TLS.Client()
	if err != nil {
		t.Fatal(err)
	}
	ask := func(u KafkaUser) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(append(u.kgoOpts(), kgo.SeedBrokers(broker), kgo.DialTLSConfig(tc))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		return err
	}
	u := KafkaUser{Mechanism: kc.SASLMechanism, Name: kc.SASLUsername, Password: kc.SASLPassword}
	if err := ask(u); err != nil {
		t.Errorf("kafka metadata as %s (%s): %v", u.Name, u.Mechanism, err)
	}
	u.Password += "-wrong"
	if err := ask(u); err == nil {
		t.Errorf("kafka metadata with a wrong password: no error")
	}
}

// TestDevCerts: dq dev certs writes a CA, a server certificate that chains
// to it for every host, a client certificate, and with --secrets the
// passwords and the Redis ACL file; run again it keeps them; with other
// hosts it makes new certificates and keeps the passwords.
func TestDevCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	hosts := []string{"redis", "etcd", "127.0.0.1", "localhost"}
	if _, errOut, err := runDQ(t, nil, "dev", "certs", "--dir", dir, "--hosts", strings.Join(hosts, ","), "--secrets", "--namespace", "ns1"); err != nil {
		t.Fatalf("dq dev certs: %v\n%s", err, errOut)
	}
	pool, err := config.LoadCA(filepath.Join(dir, certCA))
	if err != nil {
		t.Fatal(err)
	}
	server := loadLeaf(t, dir, certServer)
	for _, h := range hosts {
		if _, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: h, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", h, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: "elsewhere"}); err == nil {
		t.Errorf("server certificate verifies for a host not asked for")
	}
	clientCert := loadLeaf(t, dir, certClient)
	if _, err := clientCert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || clientCert.Subject.CommonName != devUser {
		t.Errorf("client certificate %q: %v", clientCert.Subject.CommonName, err)
	}
	for _, f := range []string{"server.key", "client.key", secretRedis, secretEtcd, secretEtcdRoot, secretKafka, redisACLFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
	}
	aclText, err := os.ReadFile(filepath.Join(dir, redisACLFile))
	if err != nil {
		t.Fatal(err)
	}
	redisPW, err := config.ReadSecretFile(filepath.Join(dir, secretRedis))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"user default off\n", "user delayq on >" + redisPW + " ", "~dq:{ns1:*", "user health on nopass"} {
		if !strings.Contains(string(aclText), want) {
			t.Errorf("%s lacks %q:\n%s", redisACLFile, want, aclText)
		}
	}

	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	caBefore, etcdBefore := read(certCA), read(secretEtcd)
	out, _, err := runDQ(t, nil, "dev", "certs", "--dir", dir, "--hosts", strings.Join(hosts, ","), "--secrets", "--namespace", "ns1")
	if err != nil || !strings.Contains(out, "kept the certificates") || read(certCA) != caBefore || read(secretEtcd) != etcdBefore {
		t.Errorf("second run: %v, %q; want everything kept", err, out)
	}
	if _, _, err := runDQ(t, nil, "dev", "certs", "--dir", dir, "--hosts", "kafka", "--secrets"); err != nil {
		t.Fatal(err)
	}
	if read(certCA) == caBefore || read(secretEtcd) != etcdBefore {
		t.Errorf("run with other hosts: want new certificates, the same passwords")
	}
	if _, err := loadLeaf(t, dir, certServer).Verify(x509.VerifyOptions{Roots: mustPool(t, dir), DNSName: "kafka"}); err != nil {
		t.Errorf("new server certificate for kafka: %v", err)
	}
	if _, _, err := runDQ(t, nil, "dev", "certs"); err == nil {
		t.Errorf("dq dev certs without --dir: no error")
	}
}

func loadLeaf(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	p, err := config.LoadCA(filepath.Join(dir, certCA))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDevInfraTLS: dq dev etcd and dq dev kafka (what the compose TLS
// override runs) with TLS and users: their plain-HTTP health endpoints
// answer, user delayq works within its rights.
func TestDevInfraTLS(t *testing.T) {
	pki := testenv.NewPKI(t)
	// a generous bound for both servers to say they are ready
	waitLine := func(b *syncBuffer, prefix string) string {
		t.Helper()
		var line string
		testenv.WaitFor(t, 30*time.Second, prefix, func() bool {
			for _, l := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(l, prefix) {
					line = l
					return true
				}
			}
			return false
		})
		return line
	}
	healthURL := regexp.MustCompile(`health on (http://\S+/health)`)
	start := func(args ...string) (*syncBuffer, func()) {
		ctx, cancel := context.WithCancel(t.Context())
		var b syncBuffer
		done := make(chan error, 1)
		go func() { done <- Run(ctx, args, Env{Stdout: &b, Stderr: &b}) }()
		return &b, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("dq %v: %v", args, err)
			}
		}
	}

	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eb, stopEtcd := start("dev", "etcd", "--listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key, "--tls-ca", pki.Server.CA,
		"--health-listen", "127.0.0.1:0", "--root-password", "rootpw", "--user-file", "delayq:"+pwFile, "--namespace", "ns2")
	defer stopEtcd()
	line := waitLine(eb, "etcd ready:")
	if !strings.Contains(line, "advertising https://") || !strings.Contains(line, "authentication on (1 users)") {
		t.Errorf("etcd: %s", line)
	}
	m := healthURL.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("etcd names no health URL: %s", line)
	}
	testenv.WaitFor(t, 10*time.Second, "etcd /health over plain HTTP", func() bool {
		return probeWith(t.Context(), noKeepAlive, m[1]) == nil
	})
	endpoint := strings.TrimSuffix(strings.Fields(strings.SplitN(line, ", advertising ", 2)[1])[0], ",")
	etcdCheck(t, config.Etcd{
		EtcdEndpoints: []string{endpoint},
		EtcdTLS:       config.TLSFiles{CA: pki.Client.CA, Cert: pki.Client.Cert, Key: pki.Client.Key},
		EtcdUsername:  "delayq", EtcdPassword: "s3cret",
	}, "/ns2/x", "/dq/x")

	kb, stopKafka := start("dev", "kafka", "--listen", "127.0.0.1:0", "--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key,
		"--sasl-user", "SCRAM-SHA-512:delayq:kpw", "--health-listen", "127.0.0.1:0")
	defer stopKafka()
	line = waitLine(kb, "kafka ready:")
	if !strings.Contains(line, "TLS, SASL (1 users)") {
		t.Errorf("kafka: %s", line)
	}
	if m = healthURL.FindStringSubmatch(line); m == nil {
		t.Fatalf("kafka names no health URL: %s", line)
	}
	if err := probeWith(t.Context(), noKeepAlive, m[1]); err != nil {
		t.Errorf("kafka /health: %v", err)
	}
	broker := strings.TrimSuffix(strings.Fields(strings.SplitN(line, ", advertising ", 2)[1])[0], ",")
	kafkaCheck(t, broker, config.Kafka{TLS: config.TLSFiles{CA: pki.Server.CA}, SASLMechanism: "SCRAM-SHA-512", SASLUsername: "delayq", SASLPassword: "kpw"})
	if err := probeKafka(t.Context(), broker); err == nil {
		t.Errorf("a plain connection to the TLS broker answered")
	}
	if _, _, err := runDQ(t, nil, "dev", "kafka", "--listen", "127.0.0.1:0", "--sasl-user", "MD5:u:p"); err == nil || !strings.Contains(err.Error(), "SCRAM-SHA-256") {
		t.Errorf("an unknown mechanism: %v", err)
	}
}

// noKeepAlive is an HTTP client that leaves no connection behind.
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
