package compose_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/delayq/delayq/deploy/compose"
	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/event"
	"github.com/delayq/delayq/internal/work"
)

// apps maps the command our image runs to the application it is: its
// run function, as cmd/<app> and dq call it. /dq's own commands (dev,
// health) take flags and read no DQ_* variable.
var apps = map[string]config.RunFunc{
	"/daemon": daemon.Run,
	"/event":  event.Run,
	"/work":   work.Run,
	"/dq":     nil,
}

// scalable are the services `docker compose up --scale` must be able to
// multiply.
var scalable = []string{"event", "work"}

// usageEnv finds the variables in an application's -h output: every
// setting's usage ends with "(env DQ_X)".
var usageEnv = regexp.MustCompile(`\(env (DQ_[A-Z0-9_]+)\)`)

var (
	boundOnce sync.Map // command -> map[string]bool
)

// boundEnv returns the DQ_* names that the application run by command
// binds, asking it: its -h output names every variable it reads, however
// the name was built (config.Binder's TLS, ServerTLS, BindEtcd and
// BindKafka compose them).
func boundEnv(t *testing.T, command string) map[string]bool {
	t.Helper()
	if v, ok := boundOnce.Load(command); ok {
		return v.(map[string]bool)
	}
	names := map[string]bool{}
	if run := apps[command]; run != nil {
		var usage strings.Builder
		if err := run(t.Context(), []string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, config.ErrHelp) {
			t.Fatalf("%s -h: %v, want the usage (config.ErrHelp)", command, err)
		}
		for _, m := range usageEnv.FindAllStringSubmatch(usage.String(), -1) {
			names[m[1]] = true
		}
		if len(names) == 0 {
			t.Fatalf("%s -h names no DQ_* variable: the pattern %s no longer matches its usage:\n%s", command, usageEnv, usage.String())
		}
	}
	boundOnce.Store(command, names)
	return names
}

// readsFile reports whether the application run by command reads setting
// name from the file that name+"_FILE" names (config.Binder.Secret),
// asking it: given both, a secret setting is refused with "NAME and
// NAME_FILE: set one of them" before anything starts. An invalid log level
// stops a run whose setting is not a secret at validation, and the
// context is cancelled besides.
func readsFile(t *testing.T, command, name string) bool {
	t.Helper()
	run := apps[command]
	if run == nil || !boundEnv(t, command)[name] {
		return false
	}
	env := map[string]string{name: "x", name + "_FILE": filepath.Join(t.TempDir(), "missing")}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, []string{"-log-level", "not-a-level"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil {
		t.Fatalf("%s with an invalid log level: no error", command)
	}
	return strings.Contains(err.Error(), name+" and "+name+"_FILE")
}

// tlsFile is the override with secured connections everywhere.
const tlsFile = "compose.tls.yaml"

// projects loads the stack as users run it (compose.yaml), as it runs
// without a registry (with compose.local.yaml), and with secured
// connections (with compose.tls.yaml, alone and on top of the local one).
func projects(t *testing.T) map[string]*types.Project {
	t.Helper()
	out := map[string]*types.Project{}
	for name, local := range map[string]bool{"compose.yaml": false, "compose.yaml+compose.local.yaml": true} {
		p, err := compose.Load(t.Context(), local, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	for _, files := range [][]string{{compose.Main, tlsFile}, {compose.Main, compose.Local, tlsFile}} {
		out[strings.Join(files, "+")] = loadFiles(t, files...)
	}
	return out
}

// loadFiles parses the files of this directory in order, as `docker
// compose -p delayq -f A -f B ...` would, with no environment (every
// ${VAR:-default} takes its default).
func loadFiles(t *testing.T, names ...string) *types.Project {
	t.Helper()
	details := types.ConfigDetails{WorkingDir: ".", Environment: types.Mapping{}}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		details.ConfigFiles = append(details.ConfigFiles, types.ConfigFile{Filename: n, Content: b})
	}
	p, err := loader.LoadWithContext(t.Context(), details, func(o *loader.Options) {
		o.SetProjectName("delayq", true)
		o.SkipResolveEnvironment = false
	})
	if err != nil {
		t.Fatalf("load %v: %v", names, err)
	}
	return p
}

// appOf returns the image command of one of our binaries, or "".
func appOf(s types.ServiceConfig) string {
	if len(s.Command) == 0 {
		return ""
	}
	if _, ok := apps[s.Command[0]]; ok && strings.Contains(s.Image, "delayq") {
		return s.Command[0]
	}
	return ""
}

func oneshot(s types.ServiceConfig) bool { return s.Labels["dev.delayq.oneshot"] == "true" }

func sortedServices(p *types.Project) []types.ServiceConfig {
	var out []types.ServiceConfig
	for _, s := range p.Services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TestComposeEnvNamesAreBound: every DQ_* variable a service sets is one
// that the binary it runs actually reads; a typo or a renamed setting
// would otherwise be ignored silently. Services that are not ours set no
// DQ_* variable at all.
func TestComposeEnvNamesAreBound(t *testing.T) {
	for name, p := range projects(t) {
		for _, s := range sortedServices(p) {
			app := appOf(s)
			for env := range s.Environment {
				if !strings.HasPrefix(env, "DQ_") {
					continue
				}
				if app == "" {
					t.Errorf("%s: service %s (image %s) sets %s but does not run a delayq binary", name, s.Name, s.Image, env)
					continue
				}
				if boundEnv(t, app)[env] {
					continue
				}
				if base, ok := strings.CutSuffix(env, "_FILE"); ok && readsFile(t, app, base) {
					continue
				}
				t.Errorf("%s: service %s sets %s, which %s does not read", name, s.Name, env, app)
			}
		}
	}
}

// TestComposeRequiredEnv: each application gets the addresses it needs
// (the pinned env contract), pointing at the services of the stack.
func TestComposeRequiredEnv(t *testing.T) {
	need := map[string][]string{
		"/daemon": {"DQ_REDIS_ADDRS", "DQ_HTTP_ADDR", "DQ_JOURNAL_DIR", "DQ_ETCD_ENDPOINTS"},                     // etcd: the limits API
		"/event":  {"DQ_REDIS_ADDRS", "DQ_HTTP_ADDR", "DQ_ETCD_ENDPOINTS", "DQ_KAFKA_BROKERS"},                   // etcd: leader elections
		"/work":   {"DQ_REDIS_ADDRS", "DQ_HTTP_ADDR", "DQ_KAFKA_BROKERS", "DQ_WEBHOOK_URL", "DQ_ETCD_ENDPOINTS"}, // etcd: rate-limit rules
	}
	for name, p := range projects(t) {
		seen := map[string]bool{}
		for _, s := range sortedServices(p) {
			app := appOf(s)
			seen[app] = true
			for _, env := range need[app] {
				v := s.Environment[env]
				if v == nil || *v == "" {
					t.Errorf("%s: service %s (%s) lacks %s", name, s.Name, app, env)
					continue
				}
				for _, addr := range strings.Split(*v, ",") {
					host := addr
					if u, err := url.Parse(addr); err == nil && u.Host != "" {
						host = u.Hostname()
					} else if h, _, err := net.SplitHostPort(addr); err == nil {
						host = h
					}
					if host != "" && p.Services[host].Name == "" && env != "DQ_HTTP_ADDR" && env != "DQ_JOURNAL_DIR" {
						t.Errorf("%s: service %s: %s=%s names host %q, which is not a service of the stack", name, s.Name, env, *v, host)
					}
				}
			}
		}
		for app := range need {
			if !seen[app] {
				t.Errorf("%s: no service runs %s", name, app)
			}
		}
	}
}

// TestComposeScalable: `docker compose up --scale event=3 --scale work=4`
// needs the scaled services to have no fixed container name and no fixed
// host port (either would collide between replicas); they start with two
// replicas each.
func TestComposeScalable(t *testing.T) {
	for name, p := range projects(t) {
		for _, svc := range scalable {
			s, ok := p.Services[svc]
			if !ok {
				t.Errorf("%s: no service %s", name, svc)
				continue
			}
			if s.ContainerName != "" {
				t.Errorf("%s: %s has container_name %q: replicas would collide", name, svc, s.ContainerName)
			}
			for _, port := range s.Ports {
				if port.Published != "" {
					t.Errorf("%s: %s publishes host port %s: replicas would collide", name, svc, port.Published)
				}
			}
			if got := s.GetScale(); got != 2 {
				t.Errorf("%s: %s starts %d replicas, want 2", name, svc, got)
			}
			for _, v := range s.Volumes {
				if v.ReadOnly {
					continue // shared by design (certificates, secrets)
				}
				if v.Type == types.VolumeTypeVolume || v.Type == types.VolumeTypeBind {
					t.Errorf("%s: %s mounts %s at %s: replicas would share it", name, svc, v.Source, v.Target)
				}
			}
		}
	}
}

// TestComposeHealthAndRestart: every long-running service has a healthcheck
// and a restart policy; one-shot services restart on failure and are waited
// for with service_completed_successfully. Our images have no shell, so our
// healthchecks run /dq health against the port the binary listens on.
func TestComposeHealthAndRestart(t *testing.T) {
	for name, p := range projects(t) {
		for _, s := range sortedServices(p) {
			restart := s.Restart
			if restart == "" && s.Deploy != nil && s.Deploy.RestartPolicy != nil {
				restart = s.Deploy.RestartPolicy.Condition
			}
			if oneshot(s) {
				if restart != types.RestartPolicyOnFailure {
					t.Errorf("%s: one-shot %s: restart %q, want on-failure", name, s.Name, restart)
				}
				for _, other := range p.Services {
					if dep, ok := other.DependsOn[s.Name]; ok && dep.Condition != types.ServiceConditionCompletedSuccessfully {
						t.Errorf("%s: %s waits for one-shot %s with %q, want %s", name, other.Name, s.Name, dep.Condition, types.ServiceConditionCompletedSuccessfully)
					}
				}
				continue
			}
			if !slices.Contains([]string{types.RestartPolicyAlways, types.RestartPolicyUnlessStopped, types.RestartPolicyOnFailure}, restart) {
				t.Errorf("%s: %s: restart policy %q", name, s.Name, restart)
			}
			hc := s.HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
				t.Errorf("%s: %s has no healthcheck", name, s.Name)
				continue
			}
			if strings.Contains(s.Image, "delayq") && hc.Test[0] == "CMD-SHELL" {
				t.Errorf("%s: %s: CMD-SHELL healthcheck, but delayq images have no shell", name, s.Name)
			}
			if app := appOf(s); app != "" && app != "/dq" {
				addr := s.Environment["DQ_HTTP_ADDR"]
				if addr == nil {
					continue // reported by TestComposeRequiredEnv
				}
				_, port, err := net.SplitHostPort(*addr)
				if err != nil {
					t.Errorf("%s: %s: DQ_HTTP_ADDR=%q: %v", name, s.Name, *addr, err)
					continue
				}
				scheme := "http"
				if s.Environment["DQ_HTTP_TLS_CERT"] != nil {
					// HTTPS: dq health verifies the certificate with
					// the system roots, which SSL_CERT_DIR or
					// SSL_CERT_FILE must extend with the CA
					scheme = "https"
					if s.Environment["SSL_CERT_DIR"] == nil && s.Environment["SSL_CERT_FILE"] == nil {
						t.Errorf("%s: %s serves HTTPS, but its healthcheck's dq health cannot trust the certificate (no SSL_CERT_DIR or SSL_CERT_FILE)", name, s.Name)
					}
				}
				want := []string{"CMD", "/dq", "health", "--url", scheme + "://127.0.0.1:" + port + "/healthz"}
				if !slices.Equal(hc.Test, want) {
					t.Errorf("%s: %s: healthcheck %q, want %q (the port of DQ_HTTP_ADDR)", name, s.Name, hc.Test, want)
				}
			}
		}
	}
}

// TestComposeDurableData: Redis runs with the recommended settings and its
// data, the daemon's journal, etcd's and Kafka's data live in named volumes.
func TestComposeDurableData(t *testing.T) {
	wantArgs := [][2]string{
		{"--appendonly", "yes"}, {"--appendfsync", "always"},
		{"--hash-max-listpack-value", "512"}, {"--hash-max-listpack-entries", "256"},
		{"--maxmemory-policy", "noeviction"},
	}
	volumeAt := func(s types.ServiceConfig, target string) bool {
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && v.Target == target {
				return true
			}
		}
		return false
	}
	for name, p := range projects(t) {
		redis := p.Services["redis"]
		if len(redis.Command) == 0 || redis.Command[0] != "redis-server" {
			t.Errorf("%s: redis command %q does not start redis-server", name, redis.Command)
		}
		for _, kv := range wantArgs {
			i := slices.Index(redis.Command, kv[0])
			if i < 0 || i+1 >= len(redis.Command) || redis.Command[i+1] != kv[1] {
				t.Errorf("%s: redis command %q lacks %s %s", name, redis.Command, kv[0], kv[1])
			}
		}
		if !volumeAt(redis, "/data") {
			t.Errorf("%s: redis has no volume at /data", name)
		}
		daemon := p.Services["daemon"]
		if dir := daemon.Environment["DQ_JOURNAL_DIR"]; dir == nil || !volumeAt(daemon, *dir) {
			t.Errorf("%s: the daemon's journal (DQ_JOURNAL_DIR) is not on a volume", name)
		}
		if daemon.GetScale() != 1 {
			t.Errorf("%s: daemon scale %d: one daemon per journal volume", name, daemon.GetScale())
		}
		for _, svc := range []string{"etcd", "kafka"} {
			if len(p.Services[svc].Volumes) == 0 {
				t.Errorf("%s: %s keeps its data in no volume", name, svc)
			}
		}
	}
}

// TestComposeLocalKeepsServices: the registry-free override changes images
// and commands only: same services, same application environment.
func TestComposeLocalKeepsServices(t *testing.T) {
	ps := projects(t)
	main, local := ps["compose.yaml"], ps["compose.yaml+compose.local.yaml"]
	if !slices.Equal(main.ServiceNames(), local.ServiceNames()) {
		t.Fatalf("services differ: %v vs %v", main.ServiceNames(), local.ServiceNames())
	}
	for _, s := range sortedServices(main) {
		if appOf(s) == "" {
			continue
		}
		l := local.Services[s.Name]
		if l.Image != s.Image || !slices.Equal(l.Command, s.Command) {
			t.Errorf("%s: the override changes our service (%s %q -> %s %q)", s.Name, s.Image, s.Command, l.Image, l.Command)
		}
	}
	for _, svc := range []string{"redis", "etcd", "kafka", "kafka-init"} {
		if img := local.Services[svc].Image; !strings.HasPrefix(img, "delayq") {
			t.Errorf("local %s uses image %s, which needs a registry", svc, img)
		}
	}
}

// certsWrites are the files `dq dev certs --secrets` writes
// (internal/cli): what the TLS override may name under the tls volume.
var certsWrites = []string{"ca.crt", "server.crt", "server.key", "client.crt", "client.key",
	"redis.password", "etcd.password", "etcd-root.password", "kafka.password", "users.acl"}

// TestComposeTLS: the TLS override secures every connection: Redis on TLS
// only with client certificates and an ACL file, every application with
// the TLS, ACL-user and SASL settings and passwords from files, etcd over
// https; every file it names is one the certs one-shot writes into the
// volume the service mounts, and nothing starts before certs finished.
func TestComposeTLS(t *testing.T) {
	main := projects(t)["compose.yaml"]
	for _, name := range []string{compose.Main + "+" + tlsFile, compose.Main + "+" + compose.Local + "+" + tlsFile} {
		p := projects(t)[name]
		if want := append(main.ServiceNames(), "certs"); !slices.Equal(sortedCopy(p.ServiceNames()), sortedCopy(want)) {
			t.Errorf("%s: services %v, want compose.yaml's and certs", name, p.ServiceNames())
		}
		certs := p.Services["certs"]
		if !oneshot(certs) || !slices.Equal(certs.Command[:3], []string{"/dq", "dev", "certs"}) || !slices.Contains(certs.Command, "--secrets") {
			t.Fatalf("%s: certs is not the one-shot dq dev certs --secrets: %q", name, certs.Command)
		}
		dir := certs.Command[slices.Index(certs.Command, "--dir")+1]
		var tlsVolume string
		for _, v := range certs.Volumes {
			if v.Target == dir {
				tlsVolume = v.Source
			}
		}
		if tlsVolume == "" {
			t.Fatalf("%s: certs writes into %s, which is no volume", name, dir)
		}

		redis := p.Services["redis"].Command
		for _, kv := range [][2]string{{"--port", "0"}, {"--tls-auth-clients", "yes"}} {
			if i := slices.Index(redis, kv[0]); i < 0 || i+1 >= len(redis) || redis[i+1] != kv[1] {
				t.Errorf("%s: redis command %q lacks %s %s", name, redis, kv[0], kv[1])
			}
		}
		for _, flag := range []string{"--tls-port", "--tls-cert-file", "--tls-key-file", "--tls-ca-cert-file", "--aclfile"} {
			if !slices.Contains(redis, flag) {
				t.Errorf("%s: redis command lacks %s", name, flag)
			}
		}

		need := []string{"DQ_REDIS_USERNAME", "DQ_REDIS_PASSWORD_FILE", "DQ_REDIS_TLS_CA", "DQ_REDIS_TLS_CERT", "DQ_REDIS_TLS_KEY",
			"DQ_ETCD_TLS_CA", "DQ_ETCD_TLS_CERT", "DQ_ETCD_TLS_KEY", "DQ_ETCD_USERNAME", "DQ_ETCD_PASSWORD_FILE", "DQ_HTTP_TLS_CERT", "DQ_HTTP_TLS_KEY"}
		kafkaNeed := []string{"DQ_KAFKA_TLS_CA", "DQ_KAFKA_SASL_MECHANISM", "DQ_KAFKA_SASL_USERNAME", "DQ_KAFKA_SASL_PASSWORD_FILE"}
		for _, s := range sortedServices(p) {
			app := appOf(s)
			if app == "/daemon" || app == "/event" || app == "/work" {
				want := need
				if app != "/daemon" {
					want = append(slices.Clone(need), kafkaNeed...)
				}
				for _, env := range want {
					if v := s.Environment[env]; v == nil || *v == "" {
						t.Errorf("%s: %s lacks %s", name, s.Name, env)
					}
				}
				for env, v := range s.Environment {
					if strings.HasSuffix(env, "_PASSWORD") && v != nil && *v != "" {
						t.Errorf("%s: %s sets %s in the environment; read it from a file (%s_FILE)", name, s.Name, env, env)
					}
				}
				if v := s.Environment["DQ_ETCD_ENDPOINTS"]; v == nil || !strings.HasPrefix(*v, "https://") {
					t.Errorf("%s: %s: DQ_ETCD_ENDPOINTS %v, want https://", name, s.Name, v)
				}
			}
			// every file named under the certs directory is one certs
			// writes, in the volume this service mounts there
			var named []string
			for _, v := range s.Environment {
				if v != nil {
					named = append(named, *v)
				}
			}
			for _, arg := range s.Command {
				named = append(named, strings.Split(arg, ":")...)
			}
			if s.HealthCheck != nil {
				named = append(named, s.HealthCheck.Test...)
			}
			uses := false
			for _, f := range named {
				rest, ok := strings.CutPrefix(f, dir+"/")
				if !ok {
					continue
				}
				uses = true
				if !slices.Contains(certsWrites, rest) {
					t.Errorf("%s: %s names %s, which dq dev certs does not write", name, s.Name, f)
				}
			}
			if !uses || s.Name == "certs" {
				continue
			}
			mounted := false
			for _, v := range s.Volumes {
				mounted = mounted || (v.Source == tlsVolume && v.Target == dir && v.ReadOnly)
			}
			if !mounted {
				t.Errorf("%s: %s names files in %s but does not mount volume %s there read-only", name, s.Name, dir, tlsVolume)
			}
			if !dependsOn(p, s.Name, "certs", map[string]bool{}) {
				t.Errorf("%s: %s may start before certs wrote its files", name, s.Name)
			}
		}
	}
}

// dependsOn reports whether service from waits for service on, directly
// or through the services it waits for.
func dependsOn(p *types.Project, from, on string, seen map[string]bool) bool {
	if seen[from] {
		return false
	}
	seen[from] = true
	for dep := range p.Services[from].DependsOn {
		if dep == on || dependsOn(p, dep, on, seen) {
			return true
		}
	}
	return false
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
