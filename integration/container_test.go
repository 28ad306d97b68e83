package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	mobynet "github.com/moby/moby/api/types/network"
	mobyclient "github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/deploy/compose"
	"github.com/delayq/delayq/internal/testenv"
)

// dockerEngine reports whether a Docker engine answers, with the reason
// when not. It is asked once.
var dockerEngine struct {
	once sync.Once
	dc   *testcontainers.DockerClient
	err  error
}

func docker() (*testcontainers.DockerClient, error) {
	d := &dockerEngine
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		d.dc, d.err = testcontainers.NewDockerClientWithOpts(ctx)
		if d.err == nil {
			_, d.err = d.dc.Ping(ctx, mobyclient.PingOptions{})
		}
	})
	return d.dc, d.err
}

// requireDocker skips the test with a named reason when no Docker engine
// answers, unless DQ_REQUIRE_DOCKER is set: then it fails.
func requireDocker(t *testing.T) *testcontainers.DockerClient {
	t.Helper()
	dc, err := docker()
	if err == nil {
		return dc
	}
	if fail, msg := noDocker(err, os.Getenv("DQ_REQUIRE_DOCKER")); fail {
		t.Fatal(msg)
	} else {
		t.Skip(msg)
	}
	return nil
}

// noDocker decides what a missing engine means: a named skip, or a
// failure when DQ_REQUIRE_DOCKER is set (CI, where the tier must run).
func noDocker(err error, require string) (fail bool, msg string) {
	if require != "" {
		return true, fmt.Sprintf("container tier: no Docker engine, and DQ_REQUIRE_DOCKER is set: %v", err)
	}
	return false, fmt.Sprintf("container tier: no Docker engine: %v (set DQ_REQUIRE_DOCKER=1 to make this a failure)", err)
}

// images builds the images once per test binary run.
var images struct {
	once sync.Once
	err  error
}

// buildImages runs deploy/build-images.sh, which compiles dq on this
// machine and builds FROM scratch images: no registry is involved.
func buildImages(t *testing.T) {
	t.Helper()
	images.once.Do(func() {
		// Compile the packages once: the local tier's binaries are built
		// with the same settings (static, -trimpath), so the image build
		// then only links, instead of compiling everything a second time
		// while the local tier's build runs.
		_, _ = buildLocal()
		root, err := moduleRoot()
		if err != nil {
			images.err = err
			return
		}
		start := time.Now()
		cmd := exec.Command("bash", filepath.Join(root, "deploy", "build-images.sh"), "--redis")
		cmd.Dir = root
		// The docker CLI must talk to the engine testcontainers found.
		cmd.Env = append(os.Environ(), "GO="+testenv.GoTool(), "DOCKER_HOST="+dockerEngine.dc.DaemonHost())
		out, err := cmd.CombinedOutput()
		if err != nil {
			images.err = fmt.Errorf("deploy/build-images.sh: %w\n%s", err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "integration: built images in %.1fs:\n%s", time.Since(start).Seconds(), onlySizes(out))
	})
	if images.err != nil {
		t.Fatalf("container tier: %v", images.err)
	}
}

// onlySizes keeps the size lines of build-images.sh's output.
func onlySizes(out []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, " MB (") {
			b.WriteString("  " + l + "\n")
		}
	}
	return b.String()
}

// containerProvisioner runs every piece as a container built from this
// tree, defined by the compose stack with its registry-free override;
// secure: with compose.tls.yaml on top (container_secure_test.go).
type containerProvisioner struct{ secure bool }

func (p containerProvisioner) Name() string {
	if p.secure {
		return "containers-secure"
	}
	return "containers"
}

func (p containerProvisioner) Start(t *testing.T, spec Spec) Cluster {
	t.Helper()
	dc := requireDocker(t)
	buildImages(t)
	ctx := context.WithoutCancel(t.Context())
	ns := uniqueName("it")
	var proj *types.Project
	var err error
	if p.secure {
		proj, err = loadSecureStack(ctx, ns)
	} else {
		proj, err = compose.Load(ctx, true, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &containerCluster{
		t: t, dc: dc, ns: ns, proj: proj,
		inst: map[Role][]*containerInstance{},
		hc:   &http.Client{Timeout: 2 * time.Second},
	}
	if p.secure {
		c.hc = &http.Client{Timeout: 2 * time.Second, Transport: trusting()}
	}
	// Two networks: "dq" joins the services (with the compose service
	// names as aliases); "ctl" also holds the applications so that the
	// test still reaches one that was cut off "dq" (Disconnect).
	for _, n := range []**testcontainers.DockerNetwork{&c.net, &c.ctl} {
		nw, err := network.New(ctx, network.WithLabels(map[string]string{"dev.delayq.test": c.ns}))
		if err != nil {
			t.Fatalf("container tier: create network: %v", err)
		}
		*n = nw
		t.Cleanup(func() {
			began := time.Now()
			defer func() { t.Logf("container tier: network removed in %v", time.Since(began).Round(time.Millisecond)) }()
			// A busy engine may still be detaching removed containers:
			// retry while the network has endpoints.
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for {
				err := nw.Remove(rctx)
				if err == nil {
					return
				}
				if !strings.Contains(err.Error(), "active endpoints") || rctx.Err() != nil {
					t.Errorf("remove network %s: %v", nw.Name, err)
					return
				}
				time.Sleep(250 * time.Millisecond) // poll interval of a bounded retry
			}
		})
	}
	gw := c.gateway(t, c.net)
	if p.secure {
		// before any container: they mount what it writes
		c.sec = c.writeSecure(t)
	}
	// Remove every container (in parallel; before the networks, which
	// were registered for cleanup first), showing their logs when the
	// test failed.
	t.Cleanup(func() {
		began := time.Now()
		defer func() { t.Logf("container tier: containers removed in %v", time.Since(began).Round(time.Millisecond)) }()
		c.mu.Lock()
		all := slices.Clone(c.all)
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, in := range all {
			if t.Failed() {
				t.Logf("--- container %s logs (tail) ---\n%s", in.name, c.logs(in))
			}
			wg.Go(func() {
				// Generous: a busy engine takes tens of seconds.
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				// docker rm -f: kill and remove in one call (faster than
				// testcontainers' stop-then-remove).
				_, err := c.dc.ContainerRemove(rctx, in.c.GetContainerID(), mobyclient.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
				if err != nil {
					t.Errorf("remove container %s: %v", in.name, err)
				}
			})
		}
		wg.Wait()
	})

	// The webhook receiver runs in the test; containers reach the host at
	// the gateway address of their network.
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatalf("container tier: listen for webhooks on the network gateway %s: %v", gw, err)
	}
	hook := &http.Server{Handler: spec.Webhook, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hook.Serve(ln) }()
	t.Cleanup(func() { _ = hook.Close() })

	// Infrastructure, as the compose stack defines it, created in parallel.
	began := time.Now()
	kafka := c.service(t, "kafka")
	if !p.secure {
		// Advertise the container's own address instead of the name
		// "kafka", so that the test (on the host) can consume what event
		// produced. (Secured, the broker keeps advertising kafka:9092, the
		// name its certificate carries; the test's client resolves it,
		// see secureCluster.kafkaOpts.)
		kafka.Command = dropFlag(kafka.Command, "--advertise")
	}
	infra := c.runAll(t, []containerSpec{
		{name: "redis", svc: c.service(t, "redis")},
		{name: "etcd", svc: c.service(t, "etcd")},
		{name: "kafka", svc: kafka},
	})
	c.redis, c.etcd, c.kafka = infra[0], infra[1], infra[2]
	c.waitInfra(t)
	c.brokers = []string{net.JoinHostPort(c.ip(t, c.kafka, c.net), "9092")}
	infraReady := time.Since(began)

	// The applications, all at once: each waits for what it needs.
	hookURL := "http://" + ln.Addr().String()
	env := merge(baseEnv(c.ns), spec.Env)
	c.shards, _ = strconv.Atoi(env["DQ_SHARDS"])
	var specs []containerSpec
	for _, r := range Roles {
		for i := range spec.count(r) {
			ienv := env
			if r == Work {
				ienv = merge(env, map[string]string{"DQ_WEBHOOK_URL": workerHook(hookURL, i)})
			}
			specs = append(specs, containerSpec{name: fmt.Sprintf("%s-%d", r, i), svc: c.service(t, string(r)), env: ienv, app: true, role: r, i: i})
		}
	}
	apps := c.runAll(t, specs)
	for _, in := range apps {
		c.inst[in.role] = append(c.inst[in.role], in)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(apps))
	for i, in := range apps {
		wg.Go(func() { errs[i] = c.waitHealthy(ctx, in) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("container tier: infrastructure ready in %v, %d applications healthy in %v",
		infraReady.Round(time.Millisecond), len(apps), time.Since(began).Round(time.Millisecond))
	return c
}

type containerCluster struct {
	t       *testing.T
	mu      sync.Mutex
	all     []*containerInstance // every container created, for cleanup
	dc      *testcontainers.DockerClient
	ns      string
	shards  int
	proj    *types.Project
	net     *testcontainers.DockerNetwork
	ctl     *testcontainers.DockerNetwork
	redis   *containerInstance
	etcd    *containerInstance
	kafka   *containerInstance
	brokers []string
	inst    map[Role][]*containerInstance
	hc      *http.Client
	sec     *secureCluster // nil: plain connections
}

type containerInstance struct {
	name string
	role Role
	i    int
	port int // HTTP port inside the container (applications)
	c    testcontainers.Container

	mu    sync.Mutex
	admin string // http://<ctl IP>:port, refreshed after every start
}

// service returns a service of the compose stack.
func (c *containerCluster) service(t *testing.T, name string) types.ServiceConfig {
	t.Helper()
	s, ok := c.proj.Services[name]
	if !ok {
		t.Fatalf("compose stack has no service %q", name)
	}
	return s
}

// containerSpec is one container to create from a compose service.
type containerSpec struct {
	name string
	svc  types.ServiceConfig
	env  map[string]string // added to the service's environment
	app  bool              // one of our applications: also on "ctl"
	role Role
	i    int
}

// runAll creates and starts containers in parallel, in the order given.
func (c *containerCluster) runAll(t *testing.T, specs []containerSpec) []*containerInstance {
	t.Helper()
	out := make([]*containerInstance, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { out[i], errs[i] = c.run(t, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("container tier: %v", err)
	}
	return out
}

// run creates and starts one container from a compose service: its image,
// command and environment (s.env added on top), on the "dq" network under
// the service name, and for applications also on "ctl". The container is
// removed at cleanup.
func (c *containerCluster) run(t *testing.T, s containerSpec) (*containerInstance, error) {
	ctx := context.WithoutCancel(t.Context())
	senv := map[string]string{}
	for k, v := range s.svc.Environment {
		if v != nil {
			senv[k] = *v
		}
	}
	nets := []string{c.net.Name}
	port := 0
	if s.app {
		nets = []string{c.ctl.Name, c.net.Name}
		addr := ""
		if a := s.svc.Environment["DQ_HTTP_ADDR"]; a != nil {
			addr = *a
		}
		if v, ok := s.env["DQ_HTTP_ADDR"]; ok {
			addr = v
		}
		_, p, _ := net.SplitHostPort(addr)
		if port, _ = strconv.Atoi(p); port == 0 {
			return nil, fmt.Errorf("service %s: DQ_HTTP_ADDR %q names no port", s.svc.Name, addr)
		}
	}
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:          s.svc.Image,
			Cmd:            s.svc.Command,
			Env:            merge(senv, s.env),
			Name:           "dq-" + c.ns + "-" + s.name,
			Labels:         map[string]string{"dev.delayq.test": c.ns},
			Networks:       nets,
			NetworkAliases: map[string][]string{c.net.Name: {s.svc.Name}},
			// Never pull: the images were built on this machine and no
			// registry is reachable.
			AlwaysPullImage: false,
		},
		Started: true,
		Logger:  tclog.TestLogger(t),
	}
	if c.sec != nil {
		c.sec.request(&req.ContainerRequest, s.svc, port)
	}
	ctr, err := testcontainers.GenericContainer(ctx, req)
	in := &containerInstance{name: s.name, c: ctr, role: s.role, i: s.i, port: port}
	if ctr != nil {
		c.mu.Lock()
		c.all = append(c.all, in)
		c.mu.Unlock()
	}
	if err != nil {
		return nil, fmt.Errorf("start %s (%s %q): %w", s.name, s.svc.Image, s.svc.Command, err)
	}
	return in, nil
}

// dropFlag removes "--name value" (or "--name=value") from a command.
func dropFlag(cmd []string, name string) []string {
	out := make([]string, 0, len(cmd))
	for i := 0; i < len(cmd); i++ {
		switch {
		case cmd[i] == name:
			i++
		case strings.HasPrefix(cmd[i], name+"="):
		default:
			out = append(out, cmd[i])
		}
	}
	return out
}

// gateway is the host's address on a network.
func (c *containerCluster) gateway(t *testing.T, nw *testcontainers.DockerNetwork) string {
	t.Helper()
	res, err := c.dc.NetworkInspect(context.WithoutCancel(t.Context()), nw.ID, mobyclient.NetworkInspectOptions{})
	if err != nil {
		t.Fatalf("inspect network %s: %v", nw.Name, err)
	}
	for _, cfg := range res.Network.IPAM.Config {
		if cfg.Gateway.Is4() {
			return cfg.Gateway.String()
		}
	}
	t.Fatalf("network %s has no IPv4 gateway", nw.Name)
	return ""
}

// ip is a container's address on a network ("" when not attached).
func (c *containerCluster) ip(t *testing.T, in *containerInstance, nw *testcontainers.DockerNetwork) string {
	t.Helper()
	ip, err := c.ipOn(context.WithoutCancel(t.Context()), in, nw)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

func (c *containerCluster) ipOn(ctx context.Context, in *containerInstance, nw *testcontainers.DockerNetwork) (string, error) {
	insp, err := in.c.Inspect(ctx)
	if err != nil {
		return "", fmt.Errorf("inspect %s: %w", in.name, err)
	}
	ep, ok := insp.NetworkSettings.Networks[nw.Name]
	if !ok || !ep.IPAddress.IsValid() {
		return "", fmt.Errorf("%s is not attached to network %s", in.name, nw.Name)
	}
	return ep.IPAddress.String(), nil
}

// waitInfra waits until Redis, etcd and Kafka answer, probed from the
// host at their container addresses.
func (c *containerCluster) waitInfra(t *testing.T) {
	t.Helper()
	if c.sec != nil {
		c.sec.waitInfra(t, c)
		return
	}
	redisAddr := net.JoinHostPort(c.ip(t, c.redis, c.net), "6379")
	waitFor(t, 30*time.Second, "redis container answers PING", func() (bool, string) {
		return redisPing(redisAddr)
	})
	etcdURL := "http://" + net.JoinHostPort(c.ip(t, c.etcd, c.net), "2379") + "/health"
	waitFor(t, 30*time.Second, "etcd container healthy", func() (bool, string) { return probe(c.hc, etcdURL) })
	kafkaAddr := net.JoinHostPort(c.ip(t, c.kafka, c.net), "9092")
	waitFor(t, 30*time.Second, "kafka container answers", kafkaAnswers(kgo.SeedBrokers(kafkaAddr)))
}

// kafkaAnswers is a waitFor condition: a client with opts pings a broker.
func kafkaAnswers(opts ...kgo.Opt) func() (bool, string) {
	return func() (bool, string) {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return false, err.Error()
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := cl.Ping(ctx); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
}

// redisPing sends PING over a fresh connection.
func redisPing(addr string) (bool, string) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false, err.Error()
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return false, err.Error()
	}
	if !bytes.HasPrefix(buf[:n], []byte("+PONG")) {
		return false, strings.TrimSpace(string(buf[:n]))
	}
	return true, ""
}

// waitHealthy refreshes the instance's admin address and waits until its
// /healthz answers.
func (c *containerCluster) waitHealthy(ctx context.Context, in *containerInstance) error {
	deadline := time.Now().Add(45 * time.Second)
	why := ""
	for time.Now().Before(deadline) {
		if st, err := in.c.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("%s exited during start (exit code %d)\n--- logs ---\n%s", in.name, st.ExitCode, c.logs(in))
		}
		url, err := c.adminBase(ctx, in)
		if err != nil {
			why = err.Error()
		} else {
			var ok bool
			if ok, why = probe(c.hc, url+"/healthz"); ok {
				in.mu.Lock()
				in.admin = url
				in.mu.Unlock()
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a bounded readiness loop
	}
	return fmt.Errorf("%s not healthy within 45s (%s)\n--- logs ---\n%s", in.name, why, c.logs(in))
}

// adminBase is the base URL of an application's HTTP port as the test
// reaches it: http://<ctl IP>:port, or when secured the HTTPS port
// published on the host (secureCluster.adminBase).
func (c *containerCluster) adminBase(ctx context.Context, in *containerInstance) (string, error) {
	if c.sec != nil {
		return c.sec.adminBase(ctx, in)
	}
	ip, err := c.ipOn(ctx, in, c.ctl)
	if err != nil {
		return "", err
	}
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(in.port)), nil
}

// logs returns the tail of a container's output.
func (c *containerCluster) logs(in *containerInstance) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := in.c.Logs(ctx)
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

func (c *containerCluster) get(t *testing.T, r Role, i int) *containerInstance {
	t.Helper()
	if i < 0 || i >= len(c.inst[r]) {
		t.Fatalf("no %s %d (have %d)", r, i, len(c.inst[r]))
	}
	return c.inst[r][i]
}

func (c *containerCluster) DaemonURL(i int) string { return c.AdminURL(Daemon, i) }

func (c *containerCluster) AdminURL(r Role, i int) string {
	in := c.inst[r][i]
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.admin
}

func (c *containerCluster) Brokers() []string { return c.brokers }

func (c *containerCluster) KafkaOpts() []kgo.Opt {
	if c.sec != nil {
		return c.sec.kafkaOpts()
	}
	return []kgo.Opt{kgo.SeedBrokers(c.brokers...)}
}

func (c *containerCluster) Namespace() string { return c.ns }

func (c *containerCluster) Shards() int { return c.shards }

func (c *containerCluster) Kill(t *testing.T, r Role, i int) {
	t.Helper()
	c.kill(t, c.get(t, r, i))
}

func (c *containerCluster) kill(t *testing.T, in *containerInstance) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	if _, err := c.dc.ContainerKill(ctx, in.c.GetContainerID(), mobyclient.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("docker kill %s: %v", in.name, err)
	}
	waitFor(t, 20*time.Second, in.name+" exits after SIGKILL", func() (bool, string) {
		st, err := in.c.State(ctx)
		if err != nil {
			return false, err.Error()
		}
		return !st.Running, string(st.Status)
	})
}

func (c *containerCluster) Stop(t *testing.T, r Role, i int) {
	t.Helper()
	in := c.get(t, r, i)
	ctx := context.WithoutCancel(t.Context())
	timeout := 20 * time.Second
	if err := in.c.Stop(ctx, &timeout); err != nil {
		t.Fatalf("docker stop %s: %v", in.name, err)
	}
	if st, err := in.c.State(ctx); err == nil && st.ExitCode != 0 {
		t.Errorf("%s exited with %d after SIGTERM\n%s", in.name, st.ExitCode, c.logs(in))
	}
}

func (c *containerCluster) Start(t *testing.T, r Role, i int) {
	t.Helper()
	in := c.get(t, r, i)
	ctx := context.WithoutCancel(t.Context())
	if err := in.c.Start(ctx); err != nil {
		t.Fatalf("docker start %s: %v", in.name, err)
	}
	if err := c.waitHealthy(ctx, in); err != nil {
		t.Fatal(err)
	}
}

func (c *containerCluster) StopRedis(t *testing.T) {
	t.Helper()
	timeout := 10 * time.Second
	if err := c.redis.c.Stop(context.WithoutCancel(t.Context()), &timeout); err != nil {
		t.Fatalf("docker stop redis: %v", err)
	}
}

func (c *containerCluster) StartRedis(t *testing.T) {
	t.Helper()
	if err := c.redis.c.Start(context.WithoutCancel(t.Context())); err != nil {
		t.Fatalf("docker start redis: %v", err)
	}
	addr := net.JoinHostPort(c.ip(t, c.redis, c.net), "6379")
	waitFor(t, 30*time.Second, "redis container answers PING after restart", func() (bool, string) {
		if c.sec != nil {
			return c.sec.redisPing(addr)
		}
		return redisPing(addr)
	})
}

// Disconnect is `docker network disconnect dq <container>`: the instance
// keeps running but reaches neither Redis nor etcd nor Kafka (Docker drops
// traffic between its networks); the test still reaches it on "ctl".
func (c *containerCluster) Disconnect(t *testing.T, r Role, i int) {
	t.Helper()
	in := c.get(t, r, i)
	_, err := c.dc.NetworkDisconnect(context.WithoutCancel(t.Context()), c.net.ID, mobyclient.NetworkDisconnectOptions{Container: in.c.GetContainerID(), Force: true})
	if err != nil {
		t.Fatalf("docker network disconnect %s %s: %v", c.net.Name, in.name, err)
	}
}

// Reconnect attaches the instance to "dq" again under its service name.
func (c *containerCluster) Reconnect(t *testing.T, r Role, i int) {
	t.Helper()
	in := c.get(t, r, i)
	_, err := c.dc.NetworkConnect(context.WithoutCancel(t.Context()), c.net.ID, mobyclient.NetworkConnectOptions{
		Container:      in.c.GetContainerID(),
		EndpointConfig: &mobynet.EndpointSettings{Aliases: []string{string(r)}},
	})
	if err != nil {
		t.Fatalf("docker network connect %s %s: %v", c.net.Name, in.name, err)
	}
}

func (c *containerCluster) Logs(r Role, i int) string { return c.logs(c.inst[r][i]) }

// TestNoDockerEngine: without an engine the container tier is a named
// skip, or a failure when DQ_REQUIRE_DOCKER is set.
func TestNoDockerEngine(t *testing.T) {
	err := errors.New("Cannot connect to the Docker daemon")
	if fail, msg := noDocker(err, ""); fail || !strings.HasPrefix(msg, "container tier: no Docker engine: Cannot connect") {
		t.Errorf("unset: fail %v, %q", fail, msg)
	}
	if fail, msg := noDocker(err, "1"); !fail || !strings.Contains(msg, "DQ_REQUIRE_DOCKER is set") {
		t.Errorf("DQ_REQUIRE_DOCKER=1: fail %v, %q", fail, msg)
	}
}
