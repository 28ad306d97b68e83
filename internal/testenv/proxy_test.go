package testenv

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line until closed.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// cut reports whether err is the peer closing the connection (not a read
// deadline passing).
func cut(err error) bool { return err != nil && !errors.Is(err, os.ErrDeadlineExceeded) }

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, within time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	return r.ReadString('\n')
}

// TestProxyModes: Pass forwards, Hold keeps the bytes back and delivers
// them when healed, Reset cuts the connections and refuses new ones until
// healed, Close cuts everything and waits for the goroutines.
func TestProxyModes(t *testing.T) {
	p, err := StartProxy("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("pass: %q, %v", got, err)
	}

	p.Partition(Hold)
	if got, err := roundTrip(t, c, r, "two", 200*time.Millisecond); err == nil {
		t.Fatalf("hold: got %q through a held link", got)
	}
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("heal: held bytes delivered as %q, %v", got, err)
	}

	p.Partition(Reset)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); !cut(err) {
		t.Fatalf("reset: the connection stayed open (%v)", err)
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); !cut(err) {
			t.Error("reset: a new connection was forwarded")
		}
		c2.Close()
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(t, c3, bufio.NewReader(c3), "three", 5*time.Second); err != nil || got != "three\n" {
		t.Fatalf("healed after reset: %q, %v", got, err)
	}
	if err := p.CloseWithin(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.Read(make([]byte, 1)); !cut(err) {
		t.Errorf("close: the connection stayed open (%v)", err)
	}
}
