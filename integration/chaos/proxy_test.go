package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// linkMode is what a proxy does with the bytes of its connections.
type linkMode int

const (
	// pass forwards everything.
	pass linkMode = iota
	// hold stops every byte in both directions (the connections stay
	// open, new ones are accepted but not forwarded) and delivers what it
	// held, in order, when healed: a partition whose packets arrive late.
	hold
	// reset closes every connection and closes new ones at once: a
	// partition the endpoints notice immediately.
	reset
)

func (m linkMode) String() string {
	return [...]string{"pass", "hold", "reset"}[m]
}

// proxy forwards the connections one process opens to one backend (Redis
// or an etcd member), so that the nemesis can partition that process from
// that backend without touching the others.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   linkMode
	healed chan struct{} // closed when the mode returns to pass
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// startProxy listens on a free loopback port and forwards to target.
func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is where the process connects.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// partition sets hold or reset; reset cuts every connection at once.
func (p *proxy) partition(m linkMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.mode == pass {
		p.healed = make(chan struct{})
	}
	p.mode = m
	if m == reset {
		for c := range p.conns {
			c.Close()
		}
	}
}

// heal forwards again (and delivers what hold kept back).
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != pass {
		p.mode = pass
		close(p.healed)
	}
}

// close stops the proxy, cuts every connection and waits (at most
// closeLimit) for its goroutines.
func (p *proxy) close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.mode != pass {
			close(p.healed)
		}
		p.mode = pass
		for c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.ln.Close()
	if !waitDone(&p.wg, closeLimit) {
		return fmt.Errorf("proxy to %s: its goroutines have not stopped %v after close", p.target, closeLimit)
	}
	return nil
}

// waitPass blocks while the link is held; it reports false when the
// connection must go (reset or the proxy closed).
func (p *proxy) waitPass() bool {
	for {
		p.mu.Lock()
		closed, mode, ch := p.closed, p.mode, p.healed
		p.mu.Unlock()
		switch {
		case closed || mode == reset:
			return false
		case mode == pass:
			return true
		}
		<-ch
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == reset {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *proxy) forward(client net.Conn) {
	defer p.untrack(client)
	defer client.Close()
	if !p.waitPass() {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return // the backend is down: the client sees its connection close
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	defer server.Close()
	done := make(chan struct{}, 2)
	p.wg.Go(func() { p.pipe(server, client); done <- struct{}{} })
	p.wg.Go(func() { p.pipe(client, server); done <- struct{}{} })
	<-done
	// One side finished: let the other deliver what it still has (a
	// request sent just before the client closed reaches the server, as
	// TCP would deliver it), then cut both.
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
}

// pipe copies src to dst, holding each chunk while the link is held. When
// src ends, dst's write side is closed so that dst sees the end too.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitPass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
