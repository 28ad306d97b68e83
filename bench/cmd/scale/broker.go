package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/internal/testenv"
)

// The Kafka broker (kfake) runs in a child process of this program, so
// that its CPU is measured apart from the rest of the bench process (the
// webhook sink above all): the pipeline's CPU per task is printed per kind
// of process, the broker and the sink apart (issue 46).

// brokerEnv, when set in the environment, makes this program a broker:
// "<partitions>:<topic>,<topic>,...".
const brokerEnv = "SCALE_SERVE_KAFKA"

// brokerPrefix starts the line on which a broker tells its addresses.
const brokerPrefix = "brokers "

// serveBroker runs this process as a broker when brokerEnv is set: kfake
// with the topics seeded, its addresses on stdout, until stdin closes (the
// bench stopped: a child never outlives it, see also sysProcAttr). It
// reports whether it ran.
func serveBroker() bool {
	spec, ok := os.LookupEnv(brokerEnv)
	if !ok {
		return false
	}
	parts, topics, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(parts)
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "%s=%q: want <partitions>:<topics>\n", brokerEnv, spec)
		os.Exit(2)
	}
	tb := tbenv.New("broker", os.Stderr)
	k := testenv.StartKafkaPartitions(tb, int32(n), strings.Split(topics, ",")...)
	fmt.Printf("%s%s\n", brokerPrefix, strings.Join(k.Brokers, ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	tb.Close()
	return true
}

// broker is the child process serving Kafka.
type broker struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
}

// startBroker starts this program as a broker of partitions per topic and
// returns it with its addresses; it stops with scope.
func startBroker(scope *tbenv.TB, partitions int, topics ...string) (*broker, *testenv.Kafka) {
	self, err := os.Executable()
	if err != nil {
		scope.Fatalf("broker: %v", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), brokerEnv+"="+strconv.Itoa(partitions)+":"+strings.Join(topics, ","))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = sysProcAttr()
	in, err := cmd.StdinPipe()
	if err != nil {
		scope.Fatalf("broker: %v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		scope.Fatalf("broker: %v", err)
	}
	if err := cmd.Start(); err != nil {
		scope.Fatalf("broker: %v", err)
	}
	b := &broker{cmd: cmd, stdin: in, done: make(chan struct{})}
	scope.Cleanup(b.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	addrs, ok := strings.CutPrefix(strings.TrimSpace(line), brokerPrefix)
	if err != nil || !ok || addrs == "" {
		scope.Fatalf("broker: its first line is %q (%v), want %q and its addresses", line, err, brokerPrefix)
	}
	go func() { _, _ = io.Copy(io.Discard, out); _ = cmd.Wait(); close(b.done) }()
	return b, &testenv.Kafka{Brokers: strings.Split(addrs, ",")}
}

// stop closes the broker's stdin (it exits) and waits for it, killing it
// after 10 s.
func (b *broker) stop() {
	_ = b.stdin.Close()
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

// cpu is the broker's CPU time so far.
func (b *broker) cpu() time.Duration { return procCPU(b.cmd.Process.Pid) }
