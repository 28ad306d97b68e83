//go:build !dqslim

package cli

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// devRun is a dq dev started by startDevAll.
type devRun struct {
	api       string // the API's base URL, as the banner names it
	addr      string // the API's listen address
	out, errb syncBuffer
	cancel    context.CancelFunc
	done      chan error // devAll's result, once it returned
}

// startDevAll runs devAll with o (on a free API address) until the API is
// up, or fails the test; cancel stops it, done says how it ended.
func startDevAll(t *testing.T, o devOptions) *devRun {
	t.Helper()
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	o.apiAddr = addr
	d := &devRun{addr: addr, done: make(chan error, 1)}
	env := Env{Stdout: &d.out, Stderr: &d.errb, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(t.Context())
	d.cancel = cancel
	t.Cleanup(cancel)
	apiURL := make(chan string, 1)
	go func() { d.done <- devAll(ctx, env, o, func(u string) { apiURL <- u }) }()
	select {
	case d.api = <-apiURL:
	case err := <-d.done:
		t.Fatalf("dq dev stopped: %v\n%s\n%s", err, d.out.String(), d.errb.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("dq dev not up within 60s\n%s\n%s", d.out.String(), d.errb.String())
	}
	return d
}

// TestDevAllInOne: dq dev --demo starts Redis, etcd, Kafka and the three
// applications in one process; the demo's five tasks are delivered to the
// built-in receiver; a task scheduled through the API the banner names is
// delivered too; cancelling the context stops everything cleanly.
func TestDevAllInOne(t *testing.T) {
	d := startDevAll(t, devOptions{shards: 4, demo: true, redis: "redis-server", topics: "dev.extra"})
	api, out, errb, cancel, done := d.api, &d.out, &d.errb, d.cancel, d.done
	for _, want := range []string{"API             " + api, "/metrics", "curl -s " + api + "/v1/tasks"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "topics          dq.tasks,dev.extra consumed") {
		t.Errorf("banner does not name the consumed topics:\n%s", out.String())
	}
	// A task of the default topic, one of a topic given with --topics
	// (created at start, consumed) and one of a topic nobody created
	// (created on first use: it fires instead of waiting for its grace).
	for _, tk := range []client.Task{
		{ID: "dev-own", Type: "mine", Delay: 200 * time.Millisecond},
		{ID: "dev-extra", Type: "mine", Topic: "dev.extra", Delay: 200 * time.Millisecond},
		{ID: "dev-new-topic", Type: "mine", Topic: "dev.unplanned", Delay: 200 * time.Millisecond},
	} {
		if _, err := client.New(api).Schedule(t.Context(), tk); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), `msg="task delivered"`) < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("not all 7 tasks delivered within 30s:\n%s\n--- stderr ---\n%s", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a bounded wait
	}
	// no work process consumes it: it ends delivered once Kafka has it
	testenv.WaitFor(t, 15*time.Second, "the task of an unplanned topic delivered", func() bool {
		ti, err := client.New(api).Get(t.Context(), "dev-new-topic")
		return err == nil && ti.State == "delivered"
	})
	if !strings.Contains(out.String(), "task_id=dev-own") || !strings.Contains(out.String(), "task_id=dev-extra") || strings.Count(out.String(), "demo: scheduled") != 5 {
		t.Errorf("output:\n%s", out.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dq dev: %v\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dq dev did not stop within 30s of cancellation")
	}
	if !strings.HasSuffix(out.String(), "delayq stopped\n") {
		t.Errorf("no stop message:\n%s", lastLines(out.String(), 3))
	}
}

// TestDevWithoutRedis: a missing redis-server is a clear message saying
// how to install it.
func TestDevWithoutRedis(t *testing.T) {
	_, _, err := runDQ(t, nil, "dev", "--redis-server", "/nonexistent/redis-server")
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Errorf("got %v, want the install hint", err)
	}
}

// TestDevInfraCommands: dq dev etcd and dq dev kafka (what the delayq-dev
// image runs) serve until cancelled and say where.
func TestDevInfraCommands(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		ready string
		probe func(addr string) error
	}{
		{[]string{"dev", "etcd", "--listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, "etcd ready: listening on 127.0.0.1:",
			func(addr string) error {
				_, err := probeHTTP(t.Context(), http.DefaultClient, addr+"/health")
				return err
			}},
		{[]string{"dev", "kafka", "--listen", "127.0.0.1:0", "--topics", "a,b", "--data-dir", t.TempDir()}, "kafka ready: listening on 127.0.0.1:",
			func(addr string) error { return probeKafka(t.Context(), addr) }},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		var errb syncBuffer
		done := make(chan error, 1)
		go func() { done <- Run(ctx, tc.args, Env{Stdout: &errb, Stderr: &errb}) }()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(errb.String(), tc.ready) {
			if time.Now().After(deadline) {
				t.Fatalf("dq %v: not ready within 30s: %s", tc.args, errb.String())
			}
			time.Sleep(20 * time.Millisecond) // poll interval of a bounded wait
		}
		// "... listening on 127.0.0.1:PORT, advertising ADDR, ..."
		adv := strings.TrimSuffix(strings.Fields(strings.SplitN(errb.String(), ", advertising ", 2)[1])[0], ",")
		if err := tc.probe(adv); err != nil {
			t.Errorf("dq %v: advertised %s does not answer: %v", tc.args, adv, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dq %v: %v", tc.args, err)
		}
	}
}

// An address dq dev reserves cannot be taken by anything else it starts
// (a listener on port 0 never gets it, a listener on it fails) until the
// reservation is closed, right before the applications bind it.
func TestDevReservesAddrs(t *testing.T) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	apiLn, err := reserveAPIAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	lns := []net.Listener{apiLn}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		closeAll(lns)
		t.Fatalf("%s listened on while reserved", addr)
	}
	if _, err := reserveAPIAddr(addr); err == nil || !strings.Contains(err.Error(), "--api-addr "+addr) {
		t.Errorf("reserving a reserved address: %v, want an error naming --api-addr %s", err, addr)
	}
	ports, more, err := devPorts(addr)
	if err != nil {
		t.Fatal(err)
	}
	lns = append(lns, more...)
	for _, app := range []string{"event", "work"} {
		if ln, err := net.Listen("tcp", ports[app]); err == nil {
			ln.Close()
			t.Errorf("%s's address %s listened on while reserved", app, ports[app])
		}
	}
	closeAll(lns)
	for _, a := range []string{addr, ports["event"], ports["work"]} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s after the reservation was closed: %v", a, err)
			continue
		}
		ln.Close()
	}
}
