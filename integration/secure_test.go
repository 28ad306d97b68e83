package integration

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/testenv"
)

// The secured tier: every dependency in its secured mode at once, the
// way managed services run them (issue #18):
//
//   - redis-server on TLS only (--port 0), client certificates required,
//     the default user off, delayq logging in as an ACL user with exactly
//     the rules of internal/acl;
//   - etcd with client certificate authentication and auth enabled: a
//     root user and a delayq user whose role reads and writes the
//     namespace's prefix alone;
//   - kfake on TLS with SASL/SCRAM (SHA-512) and ACLs on: the delayq
//     principal has the ACLs of internal/acl, nothing more;
//   - every binary's HTTP port on HTTPS, the webhook receiver on HTTPS
//     with a private CA.
//
// One CA for the whole test binary: the test's own HTTP client (hc)
// trusts it, so the scenarios reach https:// and http:// URLs alike.

// testPKI is the test binary's CA and certificates, written to files
// (removed by TestMain).
var testPKI = sync.OnceValues(func() (*testenv.PKI, error) {
	dir, err := os.MkdirTemp("", "dq-integration-pki-")
	if err != nil {
		return nil, err
	}
	pkiDir = dir
	return testenv.NewPKIIn(dir)
})

// pkiDir is testPKI's directory, once made.
var pkiDir string

// mustPKI is testPKI or a failed test.
func mustPKI(t testing.TB) *testenv.PKI {
	t.Helper()
	p, err := testPKI()
	if err != nil {
		t.Fatalf("integration PKI: %v", err)
	}
	return p
}

// trusting is an HTTP transport that trusts the system's roots and the
// test CA.
func trusting() http.RoundTripper {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if p, err := testPKI(); err == nil {
		pool.AddCert(p.CA.Cert)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr
}

// newAPI is a client of daemon i's API that trusts the test CA.
func newAPI(c Cluster, i int) *client.Client {
	return client.New(c.DaemonURL(i), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second, Transport: trusting()}))
}

// secureScenarios run in the secured tier: delivery, failover, work and
// rate limits (the list), and the misconfigurations.
var secureScenarios = []scenario{
	{"delivery", scenarioDelivery},
	{"leader_failover", scenarioLeaderFailover},
	{"worker_crash", scenarioWorkerCrash},
	{"rate_limit", scenarioRateLimit},
	{"misconfigured", scenarioMisconfigured},
}

// TestLocalSecure runs the secured scenarios against child processes. It
// is not parallel: it runs before TestLocal and the container tiers start,
// so that CI's load during their longest scenarios (the growth with a
// SIGKILL) stays what it was without it.
func TestLocalSecure(t *testing.T) {
	for _, s := range secureScenarios {
		t.Run(s.name, func(t *testing.T) { s.run(t, localProvisioner{secure: true}) })
	}
}

// secureUser is the delayq user of Redis, etcd and Kafka in the secured
// tier; each cluster gets its own password.
const secureUser = "delayq"

// writeSecret writes a password to a file of mode 0600 for a <NAME>_FILE
// setting.
func writeSecret(t *testing.T, name, value string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func secretOf(ns, what string) string { return fmt.Sprintf("%s-%s-pw", ns, what) }

// startSecure starts Redis, etcd and Kafka in their secured modes and the
// webhook receiver on HTTPS, and returns the settings of the binaries.
func (c *localCluster) startSecure(t *testing.T, hook *httptest.Server) map[string]string {
	t.Helper()
	pki := mustPKI(t)
	ns := c.ns
	rpw, epw, kpw := secretOf(ns, "redis"), secretOf(ns, "etcd"), secretOf(ns, "kafka")
	c.redis = testenv.StartRedis(t, testenv.RedisOptions{AOF: true, TLS: pki,
		Users: []testenv.RedisUser{{Name: secureUser, Password: rpw, Rules: acl.RedisRules(ns)}}})
	c.etcd = testenv.StartEtcdWith(t, testenv.EtcdOptions{TLS: pki, RootPassword: "root-" + ns,
		Users: []testenv.EtcdUser{{Name: secureUser, Password: epw, Prefixes: []string{acl.EtcdPrefix(ns)}}}})
	c.kafka = testenv.StartKafkaWith(t, testenv.KafkaOptions{
		Topics: []string{"dq.tasks", "dq.dead", "dq.outcomes"},
		TLS:    pki,
		Users:  []testenv.KafkaUser{{Mechanism: config.SASLScramSHA512, Name: secureUser, Password: kpw}},
		ACLs: kafkaACLs(acl.KafkaACLs(acl.KafkaOptions{
			Topics: []string{"dq.tasks"}, DeadTopic: "dq.dead", OutcomesTopic: "dq.outcomes", Group: ns + "-work"})),
	})
	cert, err := tls.LoadX509KeyPair(pki.Server.Cert, pki.Server.Key)
	if err != nil {
		t.Fatal(err)
	}
	hook.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	hook.StartTLS()
	return map[string]string{
		"DQ_REDIS_ADDRS":              c.redis.Addr,
		"DQ_REDIS_USERNAME":           secureUser,
		"DQ_REDIS_PASSWORD_FILE":      writeSecret(t, "redis", rpw),
		"DQ_REDIS_TLS_CA":             pki.Client.CA,
		"DQ_REDIS_TLS_CERT":           pki.Client.Cert,
		"DQ_REDIS_TLS_KEY":            pki.Client.Key,
		"DQ_ETCD_ENDPOINTS":           strings.Join(c.etcd.Endpoints, ","),
		"DQ_ETCD_TLS_CA":              pki.Client.CA,
		"DQ_ETCD_TLS_CERT":            pki.Client.Cert,
		"DQ_ETCD_TLS_KEY":             pki.Client.Key,
		"DQ_ETCD_USERNAME":            secureUser,
		"DQ_ETCD_PASSWORD_FILE":       writeSecret(t, "etcd", epw),
		"DQ_KAFKA_BROKERS":            strings.Join(c.kafka.Brokers, ","),
		"DQ_KAFKA_TLS_CA":             pki.Client.CA,
		"DQ_KAFKA_SASL_MECHANISM":     config.SASLScramSHA512,
		"DQ_KAFKA_SASL_USERNAME":      secureUser,
		"DQ_KAFKA_SASL_PASSWORD_FILE": writeSecret(t, "kafka", kpw),
		"DQ_HTTP_TLS_CERT":            pki.Server.Cert,
		"DQ_HTTP_TLS_KEY":             pki.Server.Key,
		"DQ_WEBHOOK_TLS_CA":           pki.Server.CA,
	}
}

// kafkaACLs are the recipe's ACLs as kfake seeds them.
func kafkaACLs(in []acl.KafkaACL) []kfake.ACL {
	res := map[string]kmsg.ACLResourceType{"topic": kmsg.ACLResourceTypeTopic, "group": kmsg.ACLResourceTypeGroup, "cluster": kmsg.ACLResourceTypeCluster}
	ops := map[string]kmsg.ACLOperation{"Read": kmsg.ACLOperationRead, "Write": kmsg.ACLOperationWrite, "Describe": kmsg.ACLOperationDescribe, "Create": kmsg.ACLOperationCreate}
	out := make([]kfake.ACL, len(in))
	for i, a := range in {
		out[i] = kfake.ACL{Principal: "User:" + secureUser, Resource: res[a.Resource], Name: a.Name,
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: ops[a.Operation], Allow: true}
	}
	return out
}

// restartWith restarts an instance with its first settings but those in
// change (a value "" removes the setting; nil: the first settings) and
// returns startInstance's error: an instance that exits at start or never
// answers /healthz.
func (c *localCluster) restartWith(t *testing.T, r Role, i int, change map[string]string) error {
	t.Helper()
	in := c.get(t, r, i)
	in.kill()
	in.mu.Lock()
	if in.orig == nil {
		in.orig = slices.Clone(in.env)
	}
	in.mu.Unlock()
	env := map[string]string{}
	for _, kv := range in.orig {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range change {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	in.mu.Lock()
	in.env = in.env[:0]
	for k, v := range env {
		in.env = append(in.env, k+"="+v)
	}
	in.mu.Unlock()
	fmt.Fprintf(in.out, "=== restart with %v\n", change)
	return c.startInstance(in)
}

// readyz answers an instance's /readyz: whether it is ready and its body.
func readyz(c Cluster, r Role, i int) (bool, string) {
	resp, err := hc.Get(c.AdminURL(r, i) + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, string(b)
}

// waitNotReady waits until an instance's /readyz is 503 with a body that
// holds every one of want.
func waitNotReady(t *testing.T, c Cluster, r Role, i int, want ...string) string {
	t.Helper()
	var body string
	waitFor(t, 30*time.Second, fmt.Sprintf("%s %d not ready naming %q", r, i, want), func() (bool, string) {
		var ok bool
		ok, body = readyz(c, r, i)
		if ok {
			return false, "ready: " + body
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, body
			}
		}
		return true, ""
	})
	return body
}

// scenarioMisconfigured: each wrong setting is refused clearly — a bad
// file stops the process at start with one line naming the setting; a
// wrong password, a missing client certificate, a wrong CA or a wrong
// SASL mechanism leaves the process running but not ready, /readyz naming
// the service, its address and why — nothing accepted meanwhile is lost,
// and everything runs once the setting is fixed (a restart).
func scenarioMisconfigured(t *testing.T, p Provisioner) {
	rec := newRecorder(nil)
	cl := p.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: rec})
	c, ok := cl.(*localCluster)
	if !ok {
		t.Fatalf("the misconfiguration scenario needs the process tier, got %T", cl)
	}
	api := newAPI(c, 0)
	otherCA, err := devcert.NewCA("not the CA of these servers")
	if err != nil {
		t.Fatal(err)
	}
	otherPair, err := otherCA.Client("delayq")
	if err != nil {
		t.Fatal(err)
	}
	other, err := otherCA.Write(t.TempDir(), "other", otherPair)
	if err != nil {
		t.Fatal(err)
	}
	redisAt := "talking to redis at " + c.redis.Addr
	kafkaAt := "talking to kafka at " + c.kafka.Brokers[0]
	var ids []string
	schedule := func(prefix string, n int, state string) {
		t.Helper()
		tasks := spread(prefix, "it.secure", n, time.Now().Add(500*time.Millisecond), 10*time.Millisecond)
		res, err := api.ScheduleBatch(t.Context(), tasks)
		if err != nil {
			t.Fatalf("schedule %s: %v", prefix, err)
		}
		for i, r := range res {
			if r.Err != nil || r.State != state {
				t.Fatalf("schedule %s item %d: state %q, error %v; want %q", prefix, i, r.State, r.Err, state)
			}
			ids = append(ids, r.ID)
		}
	}

	// 1. a bad file: the process exits at start, one line naming it
	err = c.restartWith(t, Event, 0, map[string]string{"DQ_REDIS_TLS_CA": "/nonexistent/ca.pem"})
	if err == nil || !strings.Contains(err.Error(), "DQ_REDIS_TLS_CA: open /nonexistent/ca.pem: no such file or directory") {
		t.Fatalf("event with a missing CA file: %v; want an exit naming DQ_REDIS_TLS_CA", err)
	}
	err = c.restartWith(t, Work, 0, map[string]string{"DQ_KAFKA_TLS_KEY": other.Key})
	if err == nil || !strings.Contains(err.Error(), "DQ_KAFKA_TLS_KEY") {
		t.Fatalf("work with a key but no certificate: %v; want an exit naming DQ_KAFKA_TLS_KEY", err)
	}
	err = c.restartWith(t, Work, 0, map[string]string{"DQ_KAFKA_SASL_MECHANISM": "GSSAPI"})
	if err == nil || !strings.Contains(err.Error(), `DQ_KAFKA_SASL_MECHANISM "GSSAPI": PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`) {
		t.Fatalf("work with an unknown SASL mechanism: %v; want an exit naming DQ_KAFKA_SASL_MECHANISM", err)
	}

	// 2. the daemon with a wrong Redis password: not ready, naming it;
	// schedules are journaled, then replayed once it is fixed
	if err := c.restartWith(t, Daemon, 0, map[string]string{"DQ_REDIS_PASSWORD_FILE": writeSecret(t, "wrong", "wrong")}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	since := func() time.Duration { d := time.Since(began).Round(time.Millisecond); began = time.Now(); return d }
	body := waitNotReady(t, c, Daemon, 0, "redis", "misconfigured", "wrong user name or password")
	t.Logf("daemon, wrong redis password (not ready %v after the restart): %s", since(), strings.TrimSpace(body))
	schedule("sec-pw", 5, "journaled")

	// 3. work without its Redis client certificate
	since()
	if err := c.restartWith(t, Work, 0, map[string]string{"DQ_REDIS_TLS_CERT": "", "DQ_REDIS_TLS_KEY": ""}); err != nil {
		t.Fatal(err)
	}
	body = waitNotReady(t, c, Work, 0, "redis", redisAt)
	t.Logf("work, no redis client certificate (not ready %v after the restart): %s", since(), strings.TrimSpace(body))

	// 4. event trusting another CA for Kafka: not ready, naming Kafka
	since()
	if err := c.restartWith(t, Event, 0, map[string]string{"DQ_KAFKA_TLS_CA": other.CA}); err != nil {
		t.Fatal(err)
	}
	body = waitNotReady(t, c, Event, 0, "x509", kafkaAt)
	t.Logf("event, wrong kafka CA (not ready %v after the restart): %s", since(), strings.TrimSpace(body))

	// the daemon back: the journaled tasks are replayed, then wait for
	// the event and work processes
	if err := c.restartWith(t, Daemon, 0, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "daemon ready again", func() (bool, string) { return readyz(c, Daemon, 0) })
	waitState(t, api, ids, "scheduled", 30*time.Second)
	schedule("sec-ok", 5, "scheduled")

	// 5. work with the wrong SASL mechanism (the user is SCRAM-SHA-512)
	since()
	if err := c.restartWith(t, Work, 0, map[string]string{"DQ_KAFKA_SASL_MECHANISM": config.SASLScramSHA256}); err != nil {
		t.Fatal(err)
	}
	body = waitNotReady(t, c, Work, 0, "kafka", kafkaAt)
	t.Logf("work, wrong SASL mechanism (not ready %v after the restart): %s", since(), strings.TrimSpace(body))

	// 6. event trusting another CA for etcd: with an etcd user, the
	// client logs in at start, so the process exits, naming etcd
	err = c.restartWith(t, Event, 0, map[string]string{"DQ_ETCD_TLS_CA": other.CA})
	if err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority talking to etcd at "+c.etcd.Endpoints[0]) {
		t.Fatalf("event with another CA for etcd: %v; want an exit naming etcd and its address", err)
	}
	if n := len(rec.done()); n != 0 {
		t.Errorf("%d tasks ran while the event and work processes were misconfigured", n)
	}

	// fixed: everything accepted is delivered, once, never early
	for _, r := range []Role{Event, Work} {
		if err := c.restartWith(t, r, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range Roles {
		waitFor(t, 30*time.Second, fmt.Sprintf("%s ready again", r), func() (bool, string) { return readyz(c, r, 0) })
	}
	since()
	rec.waitDone(t, ids, 60*time.Second)
	waitState(t, api, ids, "succeeded", 20*time.Second)
	checkNeverEarly(t, rec)
	t.Logf("fixed: all %d tasks accepted meanwhile ran once, %v after every process was ready again", len(ids), since())
	for id, ds := range rec.done() {
		if len(ds) != 1 {
			t.Errorf("task %s ran %d times", id, len(ds))
		}
	}
}
