package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/delayq/delayq/deploy/compose"
	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/cli/devcert"
)

// TestContainersSecure runs the delivery scenario against the container
// tier with Redis, etcd and Kafka all secured at once, as compose.yaml +
// compose.local.yaml + compose.tls.yaml define them (issue #18): Redis on
// TLS only with client certificates and ACL users (the default user off),
// etcd on https with client certificates and authentication, Kafka (dq dev
// kafka) on TLS with SASL SCRAM-SHA-256, and every application's HTTP port
// on HTTPS.
//
// Certificates and secrets: the certs one-shot is not run. The test writes
// the files it would write (the same names, checked against every /tls/
// path the started services name) into a directory on the host that is
// bind-mounted read-only at /tls into each container whose service mounts
// the tls volume there. The server certificate (for the names of the
// one-shot's --hosts) and the client certificate (CN delayq) are signed
// by the test binary's CA (mustPKI), which hc and newAPI already trust;
// the passwords are per-namespace test values and users.acl holds what
// `dq dev certs --secrets` writes: the default user off, delayq with
// acl.RedisRules of the test's namespace, health for PING. Every file is
// mode 0644 in a 0755 directory, so the images' user (65532) reads them
// whoever runs the test; the engine must see the host's file system (a
// local engine, as the webhook on the network gateway already needs).
//
// The HTTPS ports are published on the host and reached at
// https://127.0.0.1:<port>, an address the server certificate carries
// (the containers' own addresses are only known once they run).
//
// It runs beside TestContainers, outside its two-slot limiter (a variable
// of that test): one more stack at a time.
func TestContainersSecure(t *testing.T) {
	t.Parallel()
	requireDocker(t)
	t.Run("delivery", func(t *testing.T) {
		containerSlots <- struct{}{}
		t.Cleanup(func() { <-containerSlots }) // first registered: runs last
		scenarioDelivery(t, containerProvisioner{secure: true})
	})
}

// tlsMount is where compose.tls.yaml mounts volume tls, and the certs
// one-shot's --dir.
const tlsMount = "/tls"

// loadSecureStack loads the stack with secured connections, the namespace
// ns interpolated (etcd's delayq role is limited to it).
func loadSecureStack(ctx context.Context, ns string) (*types.Project, error) {
	return compose.LoadFiles(ctx, map[string]string{"DQ_NAMESPACE": ns}, compose.Main, compose.Local, compose.TLS)
}

// secureCluster is what the container tier adds when secured.
type secureCluster struct {
	dir       string      // on the host, mounted at /tls
	client    *tls.Config // the test's client certificate, trusting the CA
	kafkaPW   string      // SASL password of user delayq
	kafkaAddr string      // the broker's container address, once known
}

// writeSecure writes the certificates, passwords and Redis ACL file that
// the certs one-shot of compose.tls.yaml would write (see
// TestContainersSecure).
func (c *containerCluster) writeSecure(t *testing.T) *secureCluster {
	t.Helper()
	certs := c.service(t, "certs")
	if d := flagValue(certs.Command, "--dir"); d != tlsMount {
		t.Fatalf("compose.tls.yaml: certs writes into %q, want %s", d, tlsMount)
	}
	hosts := strings.Split(flagValue(certs.Command, "--hosts"), ",")
	pki := mustPKI(t)
	dir := filepath.Join(t.TempDir(), "tls")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	server, err := pki.CA.Server(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	client, err := pki.CA.Client(secureUser)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string]devcert.Pair{"server": server, "client": client} {
		if _, err := pki.CA.Write(dir, name, pair); err != nil {
			t.Fatal(err)
		}
	}
	rpw := secretOf(c.ns, "redis")
	files := map[string]string{
		"redis.password":     rpw,
		"etcd.password":      secretOf(c.ns, "etcd"),
		"etcd-root.password": secretOf(c.ns, "etcd-root"),
		"kafka.password":     secretOf(c.ns, "kafka"),
		// as `dq dev certs --secrets` writes it
		"users.acl": acl.RedisACLFile(secureUser, rpw, c.ns, true),
	}
	for name, v := range files {
		if !strings.HasSuffix(name, ".acl") {
			v += "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The keys too: the containers run as 65532, not as the test's user.
	for _, key := range []string{"server.key", "client.key"} {
		if err := os.Chmod(filepath.Join(dir, key), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Every file a started service names under /tls is here.
	for _, name := range []string{"redis", "etcd", "kafka", "daemon", "event", "work"} {
		s := c.service(t, name)
		for _, f := range namedStrings(s) {
			rest, ok := strings.CutPrefix(f, tlsMount+"/")
			if !ok {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, rest)); err != nil {
				t.Fatalf("compose.tls.yaml: service %s names %s, which the test does not write: %v", name, f, err)
			}
		}
	}
	return &secureCluster{dir: dir, client: pki.ClientTLS(t), kafkaPW: files["kafka.password"]}
}

// namedStrings is every string of a service that may name a file: its
// environment's values, its command's arguments (and their parts between
// colons) and its healthcheck.
func namedStrings(s types.ServiceConfig) []string {
	var out []string
	for _, v := range s.Environment {
		if v != nil {
			out = append(out, *v)
		}
	}
	for _, arg := range s.Command {
		out = append(out, strings.Split(arg, ":")...)
	}
	if s.HealthCheck != nil {
		out = append(out, s.HealthCheck.Test...)
	}
	return out
}

// flagValue is the value of "--name value" or "--name=value" in a command.
func flagValue(cmd []string, name string) string {
	for i, a := range cmd {
		if a == name && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// request adds to a container: the directory at /tls (read-only) when
// its service mounts the tls volume there, and for an application its
// HTTPS port published on the host.
func (s *secureCluster) request(req *testcontainers.ContainerRequest, svc types.ServiceConfig, port int) {
	for _, v := range svc.Volumes {
		if v.Target != tlsMount {
			continue
		}
		bind := s.dir + ":" + tlsMount + ":ro"
		prev := req.HostConfigModifier
		req.HostConfigModifier = func(hc *container.HostConfig) {
			if prev != nil {
				prev(hc)
			}
			hc.Binds = append(hc.Binds, bind)
		}
	}
	if port != 0 {
		req.ExposedPorts = append(req.ExposedPorts, strconv.Itoa(port)+"/tcp")
	}
}

// adminBase is https://127.0.0.1:<published port> of an application.
// Not the engine host testcontainers reports: run inside a container, it
// names the default gateway, where nothing is published; the tier already
// needs the engine's network namespace (the webhook listens on the
// network's gateway address).
func (s *secureCluster) adminBase(ctx context.Context, in *containerInstance) (string, error) {
	p, err := in.c.MappedPort(ctx, strconv.Itoa(in.port)+"/tcp")
	if err != nil {
		return "", fmt.Errorf("%s: published port of %d: %w", in.name, in.port, err)
	}
	return "https://" + net.JoinHostPort("127.0.0.1", p.Port()), nil
}

// tlsFor is the test's client TLS config for a server whose certificate
// names serverName (the test dials container addresses).
func (s *secureCluster) tlsFor(serverName string) *tls.Config {
	cfg := s.client.Clone()
	cfg.ServerName = serverName
	return cfg
}

// waitInfra waits until Redis, etcd and Kafka answer the test's secured
// clients at their container addresses.
func (s *secureCluster) waitInfra(t *testing.T, c *containerCluster) {
	t.Helper()
	redisAddr := net.JoinHostPort(c.ip(t, c.redis, c.net), "6379")
	waitFor(t, 30*time.Second, "redis container answers PING over TLS", func() (bool, string) { return s.redisPing(redisAddr) })
	tr := &http.Transport{TLSClientConfig: s.tlsFor("etcd")}
	defer tr.CloseIdleConnections()
	ehc := &http.Client{Timeout: 2 * time.Second, Transport: tr}
	etcdURL := "https://" + net.JoinHostPort(c.ip(t, c.etcd, c.net), "2379") + "/health"
	waitFor(t, 30*time.Second, "etcd container healthy over https with a client certificate", func() (bool, string) { return probe(ehc, etcdURL) })
	s.kafkaAddr = net.JoinHostPort(c.ip(t, c.kafka, c.net), "9092")
	waitFor(t, 30*time.Second, "kafka container answers over TLS and SASL", kafkaAnswers(s.kafkaOpts()...))
}

// redisPing logs in as the ACL user health (PING only, any password: the
// compose healthcheck's user) over TLS with the client certificate, and
// sends PING.
func (s *secureCluster) redisPing(addr string) (bool, string) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, s.tlsFor("redis"))
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*3\r\n$4\r\nAUTH\r\n$6\r\nhealth\r\n$6\r\nhealth\r\n*1\r\n$4\r\nPING\r\n")); err != nil {
		return false, err.Error()
	}
	r := bufio.NewReader(conn)
	for _, want := range []string{"+OK", "+PONG"} {
		line, err := r.ReadString('\n')
		if err != nil {
			return false, err.Error()
		}
		if strings.TrimSpace(line) != want {
			return false, strings.TrimSpace(line)
		}
	}
	return true, ""
}

// kafkaOpts log in as user delayq (SCRAM-SHA-256, compose.tls.yaml's
// DQ_KAFKA_SASL_*; dq dev kafka sets no ACLs) over TLS. The broker
// advertises kafka:9092, the name its certificate carries, which only the
// containers resolve: the test's dialer sends it to the broker's container
// address and verifies the certificate for "kafka".
func (s *secureCluster) kafkaOpts() []kgo.Opt {
	addr := s.kafkaAddr
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: s.tlsFor("kafka")}
	dial := func(ctx context.Context, network, host string) (net.Conn, error) {
		if h, _, err := net.SplitHostPort(host); err == nil && h == "kafka" {
			host = addr
		}
		return d.DialContext(ctx, network, host)
	}
	return []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.Dialer(dial),
		kgo.SASL(scram.Auth{User: secureUser, Pass: s.kafkaPW}.AsSha256Mechanism()),
	}
}
