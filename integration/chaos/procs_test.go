package chaos

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// role names one of delayq's binaries.
type role string

const (
	daemonRole role = "daemon"
	eventRole  role = "event"
	workRole   role = "work"
)

// restartDelay is how long a supervised process stays down after an exit
// nobody asked for (a fault-injection crash) before it is started again.
const restartDelay = 300 * time.Millisecond

// proc is one supervised binary: it is started again whenever it exits
// (after a kill, a crash point, a restart with other fault settings) until
// shutdown. Its HTTP address, journal directory and links stay the same
// across incarnations.
type proc struct {
	name string // e.g. "event-1"
	role role
	bin  string
	env  map[string]string
	addr string // DQ_HTTP_ADDR
	seed uint64 // DQ_FAULT_SEED base
	out  *procLog

	mu          sync.Mutex
	extra       map[string]string // fault settings of the next incarnations
	cmd         *exec.Cmd
	done        chan struct{} // closed when the current incarnation exited
	paused      bool
	want        bool
	downFor     time.Duration // how long to stay down after the next exit
	incarnation int
	quit        chan struct{}
	loopDone    chan struct{}
}

func newProc(name string, r role, bin, addr string, env map[string]string, seed uint64) *proc {
	return &proc{
		name: name, role: r, bin: bin, addr: addr, env: env, seed: seed, out: newProcLog(),
		extra: map[string]string{}, want: true, downFor: restartDelay,
		quit: make(chan struct{}), loopDone: make(chan struct{}),
	}
}

// processID is the event process' DQ_PROCESS_ID for an incarnation: the
// name plus the incarnation, unique in etcd, mapped back by procOf.
func processID(name string, incarnation int) string { return name + "." + strconv.Itoa(incarnation) }

// procName is the inverse of processID.
func procName(processID string) string {
	name, _, _ := strings.Cut(processID, ".")
	return name
}

// supervise runs incarnations until shutdown.
func (p *proc) supervise() {
	defer close(p.loopDone)
	for {
		p.mu.Lock()
		if !p.want {
			p.mu.Unlock()
			return
		}
		err := p.startLocked()
		done := p.done
		p.mu.Unlock()
		if err == nil {
			<-done
		} else {
			fmt.Fprintf(p.out, "=== start failed: %v\n", err)
		}
		p.mu.Lock()
		delay := p.downFor
		p.downFor = restartDelay
		p.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-p.quit:
			return
		}
	}
}

func (p *proc) startLocked() error {
	p.incarnation++
	env := maps.Clone(p.env)
	maps.Copy(env, p.extra)
	if p.role == eventRole {
		env["DQ_PROCESS_ID"] = processID(p.name, p.incarnation)
	}
	if env["DQ_FAULT_CRASH"] != "" {
		env["DQ_FAULT_SEED"] = strconv.FormatUint(p.seed+uint64(p.incarnation), 10)
	}
	cmd := exec.Command(p.bin)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second
	fmt.Fprintf(p.out, "=== start %s #%d at %s %v\n", p.name, p.incarnation, time.Now().Format("15:04:05.000"), p.extra)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	go func() {
		_ = cmd.Wait()
		fmt.Fprintf(p.out, "=== exit %s #%d at %s: %v\n", p.name, p.incarnation, time.Now().Format("15:04:05.000"), cmd.ProcessState)
		close(done)
	}()
	return nil
}

// running reports whether an incarnation runs (paused or not).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

func (p *proc) runningLocked() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL; the supervisor starts the process again after down.
// It reports false when no incarnation was running.
func (p *proc) kill(down time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return false
	}
	p.downFor = down
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.paused = false
	return true
}

// restartWith ends the current incarnation (SIGTERM, SIGKILL after 5s)
// and has the next one run with the given fault settings. It fails when
// the incarnation has not exited 5s after SIGKILL either.
func (p *proc) restartWith(extra map[string]string) error {
	p.mu.Lock()
	p.extra = maps.Clone(extra)
	running := p.runningLocked()
	cmd, done, paused := p.cmd, p.done, p.paused
	p.downFor = 0
	p.mu.Unlock()
	if !running {
		return nil
	}
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) has not exited 5s after SIGKILL", p.name, cmd.Process.Pid)
	}
}

// restart is restartWith for a step: an error fails tb.
func restart(tb testing.TB, p *proc, extra map[string]string) {
	if err := p.restartWith(extra); err != nil {
		tb.Fatalf("restart %s: %v", p.name, err)
	}
}

// hasExtra reports whether the process runs with fault settings.
func (p *proc) hasExtra() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.extra) > 0
}

// pause sends SIGSTOP; it reports false when nothing ran.
func (p *proc) pause() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() || p.paused {
		return false
	}
	p.paused = true
	return p.cmd.Process.Signal(syscall.SIGSTOP) == nil
}

// resume sends SIGCONT to a paused incarnation.
func (p *proc) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused && p.runningLocked() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	p.paused = false
}

// shutdown ends supervision and kills the current incarnation; it fails
// when the supervisor has not returned within closeLimit.
func (p *proc) shutdown() error {
	p.mu.Lock()
	if p.want {
		p.want = false
		close(p.quit)
	}
	if p.runningLocked() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	p.mu.Unlock()
	select {
	case <-p.loopDone:
		return nil
	case <-time.After(closeLimit):
		return fmt.Errorf("%s: its supervisor has not returned %v after SIGKILL", p.name, closeLimit)
	}
}

// procLog keeps the tail of a process' output across incarnations and
// counts the lines the suite reports: fault-injection crashes by point and
// fence refusals.
type procLog struct {
	mu      sync.Mutex
	file    io.WriteCloser // the whole output, when DQ_CHAOS_LOG_DIR is set
	tail    []byte
	partial []byte
	crashes map[string]int
	fenced  int
}

const procLogLimit = 256 << 10

func newProcLog() *procLog { return &procLog{crashes: map[string]int{}} }

// Markers printed by the binaries (internal/fault, internal/event/fire).
const (
	crashMarker  = "fault injection: SIGKILL at "
	fencedMarker = "fenced: a newer leader owns the shard"
)

func (l *procLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_, _ = l.file.Write(b)
	}
	l.tail = append(l.tail, b...)
	if extra := len(l.tail) - procLogLimit; extra > 0 {
		l.tail = append(l.tail[:0], l.tail[extra:]...)
	}
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if _, point, ok := strings.Cut(line, crashMarker); ok {
			l.crashes[strings.TrimSpace(point)]++
		}
		if strings.Contains(line, fencedMarker) {
			l.fenced++
		}
	}
	if len(l.partial) > 64<<10 {
		l.partial = l.partial[:0]
	}
	return len(b), nil
}

// Tail returns the last n bytes of output.
func (l *procLog) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.tail
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(s)
}

// keepIn also writes the whole output to path from now on.
func (l *procLog) keepIn(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.file = f
	l.mu.Unlock()
	return nil
}

// close closes the output file, if any.
func (l *procLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_ = l.file.Close()
		l.file = nil
	}
}

func (l *procLog) counts() (map[string]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.crashes), l.fenced
}
