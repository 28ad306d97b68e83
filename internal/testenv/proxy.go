package testenv

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// LinkMode is what a Proxy does with the bytes of its connections.
type LinkMode int

const (
	// Pass forwards everything.
	Pass LinkMode = iota
	// Hold stops every byte in both directions (the connections stay
	// open, new ones are accepted but not forwarded) and delivers what it
	// held, in order, when healed: a partition whose packets arrive late.
	Hold
	// Reset closes every connection and closes new ones at once: a
	// partition the endpoints notice immediately.
	Reset
)

func (m LinkMode) String() string {
	return [...]string{"pass", "hold", "reset"}[m]
}

// Proxy forwards the TCP connections accepted on one address to a target
// (an etcd member restarted behind a fixed address; a process's link to
// Redis or etcd that the chaos nemesis partitions without touching the
// others). Close cuts every forwarded connection at once and returns after
// the proxy's goroutines exited.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   LinkMode
	healed chan struct{} // closed when the mode returns to Pass
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// StartProxy listens on addr ("127.0.0.1:0" for a free loopback port) and
// forwards to target.
func StartProxy(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition sets Hold or Reset; Reset cuts every connection at once.
func (p *Proxy) Partition(m LinkMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.mode == Pass {
		p.healed = make(chan struct{})
	}
	p.mode = m
	if m == Reset {
		for c := range p.conns {
			c.Close()
		}
	}
}

// Heal forwards again (and delivers what Hold kept back).
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != Pass {
		p.mode = Pass
		close(p.healed)
	}
}

// Close stops the proxy, cuts every connection and waits until its
// goroutines stopped.
func (p *Proxy) Close() {
	p.shut()
	p.wg.Wait()
}

// CloseWithin is Close waiting at most limit: an error says the proxy's
// goroutines have not stopped by then.
func (p *Proxy) CloseWithin(limit time.Duration) error {
	p.shut()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("proxy to %s: its goroutines have not stopped %v after close", p.target, limit)
	}
}

// shut stops accepting and cuts every connection (and what Hold keeps).
func (p *Proxy) shut() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.mode != Pass {
			close(p.healed)
		}
		p.mode = Pass
		for c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.ln.Close()
}

// waitPass blocks while the link is held; it reports false when the
// connection must go (Reset or the proxy closed).
func (p *Proxy) waitPass() bool {
	for {
		p.mu.Lock()
		closed, mode, ch := p.closed, p.mode, p.healed
		p.mu.Unlock()
		switch {
		case closed || mode == Reset:
			return false
		case mode == Pass:
			return true
		}
		<-ch
	}
}

// track registers c; it reports false once the proxy is closing or reset.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Reset {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) accept() {
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

func (p *Proxy) forward(client net.Conn) {
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
func (p *Proxy) pipe(dst, src net.Conn) {
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
