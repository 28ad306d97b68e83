//go:build linux

package work

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

// proc is a work process started by startProc.
type proc struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.out.String()
	if len(s) > 8000 {
		s = s[len(s)-8000:]
	}
	return s
}

// startProc runs the work binary with vars as its whole environment; it is
// killed at the end of the test (and by the kernel if the test dies).
func startProc(t *testing.T, vars map[string]string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	port := testenv.FreePort(t)
	p.addr = "127.0.0.1:" + strconv.Itoa(port)
	vars["DQ_HTTP_ADDR"] = p.addr
	p.cmd = exec.Command(workBin)
	for k, v := range vars {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- work %s output ---\n%s", p.addr, p.output())
		}
	})
	testenv.WaitFor(t, 15*time.Second, "work process ready on "+p.addr, func() bool {
		resp, err := httpGet("http://" + p.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// metric reads one sample (a line prefix such as
// `delayq_work_handled_total{outcome="skipped_done",type="x"}`) from /metrics.
func (p *proc) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := httpGet("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// Two work processes; the one running a task that blocks at the sink is
// SIGKILLed. Its task runs again on the other process; nothing is lost;
// tasks whose handler finished before the crash are not run again (the
// survivor gets their uncommitted records and skips them).
func TestCrashKillsWorkerMidTask(t *testing.T) {
	e := newEnv(t)
	s := newSink(t)
	var mu sync.Mutex
	blockedBy := ""
	gotBlock := make(chan struct{})
	s.setRespond(func(c call, w http.ResponseWriter, r *http.Request) {
		if c.id != "block-1" {
			return
		}
		mu.Lock()
		first := blockedBy == ""
		if first {
			blockedBy = c.path
		}
		mu.Unlock()
		if first {
			close(gotBlock)
			<-r.Context().Done() // hangs until its worker dies
			return
		}
	})
	procs := map[string]*proc{
		"/p1": startProc(t, e.vars(s.srv.URL+"/p1")),
		"/p2": startProc(t, e.vars(s.srv.URL+"/p2")),
	}
	block := jsonTask("block-1", "order.cancel")
	block.Timeout = 3 * time.Second // claim TTL 3s + 1s margin
	worktest.Fire(t, e.Firer, block)
	var before []*task.Task
	want := map[string]int{"block-1": 2}
	var ids []string
	for i := range 200 {
		tk := jsonTask("before-"+itoa(i), "order.cancel")
		before = append(before, tk)
		want[tk.ID] = 1
		ids = append(ids, tk.ID)
	}
	worktest.Fire(t, e.Firer, before...)
	<-gotBlock
	e.WaitState(t, 20*time.Second, task.StateSucceeded, ids...)

	mu.Lock()
	victim, survivor := procs[blockedBy], procs[map[string]string{"/p1": "/p2", "/p2": "/p1"}[blockedBy]]
	mu.Unlock()
	victim.kill()
	killedAt := time.Now()
	t.Logf("killed the worker behind %s while block-1 was running", blockedBy)

	var after []*task.Task
	for i := range 100 {
		tk := jsonTask("after-"+itoa(i), "order.cancel")
		after = append(after, tk)
		want[tk.ID] = 1
		ids = append(ids, tk.ID)
	}
	worktest.Fire(t, e.Firer, after...)
	e.WaitState(t, 30*time.Second, task.StateSucceeded, append(ids, "block-1")...)
	t.Logf("block-1 ran again %v after the kill (session timeout 1s, claim TTL 4s)", time.Since(killedAt).Round(100*time.Millisecond))

	wrong, byPath := s.check(want)
	if len(wrong) > 0 {
		t.Fatalf("sink: %v", wrong)
	}
	if cs := s.get("block-1"); cs[1].path == blockedBy {
		t.Errorf("block-1 ran again on the killed worker")
	}
	skipped := survivor.metric(t, `delayq_work_handled_total{outcome="skipped_done",type="order.cancel"}`)
	waits := survivor.metric(t, "delayq_work_claim_waits_total")
	t.Logf("calls per worker %v; survivor skipped %v redelivered finished records, waited on %v claims", byPath, skipped, waits)
	if skipped == 0 {
		t.Errorf("the survivor skipped no redelivered record (expected the victim's uncommitted, finished ones)")
	}
}
