package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// outputLimit bounds how much of a child's output is kept in memory.
const outputLimit = 64 << 10

// tailLen is how much of a child's output goes into failure messages.
const tailLen = 4 << 10

// process is a child process whose stdout and stderr are captured.
type process struct {
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed once Wait returned
	err  error         // result of Wait; read only after done is closed
}

// startProcess starts path with args; its combined output goes to out.
func startProcess(path string, args []string, out *tailBuffer) (*process, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	// A grandchild (a Redis fork for AOF rewrite) could keep the output
	// pipe open after the process exited; do not let Wait hang on it.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits up to timeout for the process to exit; if it has
// not exited by then it is killed and stop returns an error. Stopping an
// exited process is a no-op.
func (p *process) stop(sig os.Signal, timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %v: %w", sig, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit within %v of %v; killed", timeout, sig)
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// tailBuffer is a goroutine-safe writer that keeps the last outputLimit bytes.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if extra := b.buf.Len() - outputLimit; extra > 0 {
		b.buf.Next(extra)
	}
	return len(p), nil
}

// tail returns the last tailLen bytes written.
func (b *tailBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.Bytes()
	if len(s) > tailLen {
		s = s[len(s)-tailLen:]
	}
	return string(s)
}

// contains reports whether sub occurs in the kept output.
func (b *tailBuffer) contains(sub string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf.Bytes(), []byte(sub))
}
