package compose_test

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/delayq/delayq/deploy/compose"
)

// apps maps the command our image runs to the package whose binary it is.
var apps = map[string]string{
	"/daemon": "./cmd/daemon",
	"/event":  "./cmd/event",
	"/work":   "./cmd/work",
	"/dq":     "./cmd/dq",
}

// scalable are the services `docker compose up --scale` must be able to
// multiply.
var scalable = []string{"event", "work"}

// bindCall matches a config.Binder registration and captures its
// environment variable: b.String(&c.X, "flag-name", "DQ_X", ...).
var bindCall = regexp.MustCompile(`\.(?:String|Secret|Int|Int64|Bool|Duration|List)\(\s*&[^,]+,\s*"[^"]*",\s*"(DQ_[A-Z0-9_]+)"`)

var (
	boundOnce sync.Map // package -> map[string]bool
)

// boundEnv returns the DQ_* names that the binary built from pkg binds with
// a config.Binder, found in the non-test sources of every package of this
// module that the binary links (go list -deps).
func boundEnv(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	if v, ok := boundOnce.Load(pkg); ok {
		return v.(map[string]bool)
	}
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "github.com/delayq/delayq"}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}{{end}}`, pkg)
	cmd.Dir = moduleRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		for _, f := range fields[1:] {
			src, err := os.ReadFile(filepath.Join(fields[0], f))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range bindCall.FindAllSubmatch(src, -1) {
				names[string(m[1])] = true
			}
		}
	}
	if len(names) == 0 && pkg != "./cmd/dq" {
		t.Fatalf("%s binds no DQ_* variable: the pattern %s no longer matches config.Binder calls", pkg, bindCall)
	}
	boundOnce.Store(pkg, names)
	return names
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root not at %s: %v", dir, err)
	}
	return dir
}

// projects loads the stack as users run it (compose.yaml) and as it runs
// without a registry (with compose.local.yaml).
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
	return out
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
				if !boundEnv(t, apps[app])[env] {
					t.Errorf("%s: service %s sets %s, which %s does not read", name, s.Name, env, apps[app])
				}
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
				want := []string{"CMD", "/dq", "health", "--url", "http://127.0.0.1:" + port + "/healthz"}
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
