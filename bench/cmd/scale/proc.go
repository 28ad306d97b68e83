package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/delayq/delayq/bench/internal/tbenv"
)

// proc is one child process of a delayq binary.
type proc struct {
	name  string // "daemon 0", "event 1", ...
	addr  string // DQ_HTTP_ADDR, 127.0.0.1:port
	pprof string // DQ_PPROF_ADDR when it serves its profiles, else ""
	cmd   *exec.Cmd
	out   *tail
	done  chan struct{}
}

// startProc starts bin under the name role (the dq binary runs the
// application it is invoked as: argv[0] daemon, event or work) with env
// added to this process's environment, registers its stop with scope and
// waits until /healthz answers 200.
func startProc(scope *tbenv.TB, hc *http.Client, bin, role string, i int, addr string, env map[string]string) *proc {
	p := &proc{name: role + " " + strconv.Itoa(i), addr: addr, pprof: env["DQ_PPROF_ADDR"], out: &tail{max: 64 << 10}, done: make(chan struct{})}
	cmd := exec.Command(bin)
	cmd.Args[0] = role
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		scope.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd = cmd
	go func() { _ = cmd.Wait(); close(p.done) }()
	scope.Cleanup(func() { p.stop(scope) })

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.done:
			scope.Fatalf("%s exited during start (%v)\n--- output ---\n%s", p.name, cmd.ProcessState, p.out.String())
		default:
		}
		if resp, err := hc.Get("http://" + addr + "/healthz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			scope.Fatalf("%s not healthy at %s within 30s\n--- output ---\n%s", p.name, addr, p.out.String())
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded readiness wait
	}
}

// signal asks the process to stop (SIGTERM, the graceful shutdown).
func (p *proc) signal() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// stop sends SIGTERM and waits up to 10s, then kills it.
func (p *proc) stop(scope *tbenv.TB) {
	p.signal()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		scope.Logf("%s did not stop within 10s of SIGTERM: killed", p.name)
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// metric reads one unlabelled (or the sum of a labelled) sample from the
// process's /metrics.
func (p *proc) metric(hc *http.Client, name string) (float64, error) {
	resp, err := hc.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s /metrics: %s", p.name, resp.Status)
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s: %w", name, errNotExported)
	}
	return sum, nil
}

// errNotExported: the metric has no sample yet (a labelled counter that
// nothing has counted).
var errNotExported = errors.New("not exported yet")

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
