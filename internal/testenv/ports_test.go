package testenv

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestFreePortNeverRepeatsAndAvoidsEphemeral is the CI failure this
// allocator exists for: a port handed out for a restartable server must not
// come back from FreePort, nor from the kernel to a port-0 listener.
func TestFreePortNeverRepeatsAndAvoidsEphemeral(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		if p < lo || p >= hi {
			t.Fatalf("FreePort returned %d outside [%d,%d)", p, lo, hi)
		}
		seen[p] = true
	}
	// The kernel hands port-0 listeners ephemeral ports only.
	for range 200 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if seen[p] {
			t.Fatalf("a port-0 listener got %d, which FreePort handed out", p)
		}
	}
}

// TestFreePortReservedAcrossProcesses runs a second test process that holds
// a reservation and checks that this one cannot lock the same port.
func TestFreePortReservedAcrossProcesses(t *testing.T) {
	if os.Getenv("DQ_PORT_CHILD") != "" {
		p, _ := strconv.Atoi(os.Getenv("DQ_PORT_CHILD"))
		if _, err := lockPort(p); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	p := FreePort(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortReservedAcrossProcesses$")
	cmd.Env = append(os.Environ(), "DQ_PORT_CHILD="+strconv.Itoa(p))
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("another process locked port %d that this process reserved (child: %v)", p, err)
	}
}
