package testenv

import (
	"io"
	"net"
	"sync"
	"time"
)

// tcpProxy forwards connections accepted on one address to another. close
// cuts every forwarded connection at once and returns after all of the
// proxy's goroutines exited.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startProxy listens on addr and forwards to target.
func startProxy(addr, target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

func (p *tcpProxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track registers c; it reports false once the proxy is closing.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *tcpProxy) forward(client net.Conn) {
	defer p.untrack(client)
	defer client.Close()
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	defer server.Close()

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	p.wg.Go(func() { pipe(server, client) })
	p.wg.Go(func() { pipe(client, server) })
	<-done // one side finished: tear both down (deferred closes)
}

// close stops accepting, cuts all connections and waits for the goroutines.
func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
