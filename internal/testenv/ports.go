package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Port allocation for everything the tests start.
//
// A port picked by listening on port 0 and closing the listener is only free
// "a moment ago": the kernel hands the same port to the next port-0 listener
// (a test proxy) or uses it as the source port of an outgoing connection, and
// a process restarted by a chaos nemesis then finds its own port taken. CI
// failed exactly so (a daemon's port became an etcd proxy's).
//
// FreePort therefore hands out ports below the kernel's ephemeral range,
// which the kernel never assigns on its own, never the same port twice in one
// test process, and reserves each across the test processes `go test` runs
// side by side with an flock(2) on a file named after the port. The lock dies
// with the process, so a crashed test leaves nothing behind.

// portDir holds one lock file per reserved port.
var portDir = filepath.Join(os.TempDir(), "delayq-test-ports")

var ports struct {
	mu    sync.Mutex
	taken map[int]*os.File // held for the life of the process
	lo    int              // first port of the range we hand out
	hi    int              // one past the last
}

// portRange is [lo, hi): up to 12000 ports just below the ephemeral range.
func portRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				hi = n
			}
		}
	}
	lo = max(hi-12000, 1024)
	return lo, hi
}

func freePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.taken == nil {
		ports.taken = make(map[int]*os.File)
		ports.lo, ports.hi = portRange()
		if err := os.MkdirAll(portDir, 0o777); err != nil {
			return 0, fmt.Errorf("port lock dir: %w", err)
		}
	}
	n := ports.hi - ports.lo
	start := rand.IntN(n)
	var lastErr error
	for i := range n {
		port := ports.lo + (start+i)%n
		if ports.taken[port] != nil {
			continue
		}
		lock, err := lockPort(port)
		if err != nil {
			lastErr = err
			continue
		}
		if err := bindable(port); err != nil {
			lastErr = err
			_ = lock.Close() // someone outside the tests listens there
			continue
		}
		ports.taken[port] = lock
		return port, nil
	}
	return 0, fmt.Errorf("no free port in [%d,%d): %w", ports.lo, ports.hi, lastErr)
}

// lockPort takes the cross-process reservation of port, or fails at once
// when another test process holds it.
func lockPort(port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(portDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("port %d reserved by another test process", port)
		}
		return nil, err
	}
	return f, nil
}

// bindable reports whether port can be listened on right now.
func bindable(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}
