package replicas

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to PostgreSQL so that the test can cut a
// replica off from the server: a fake for the one fault the real parts
// cannot produce on demand, a network partition. cut stops every byte
// both ways while both connections stay open (what the two ends see of a
// partition: silence); sever then closes them, which is what the server
// does of a silent client once its keepalives give up.
type proxy struct {
	ln       net.Listener
	upstream string
	cutOff   atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func newProxy(t *testing.T, upstream string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); p.sever() })
	go p.accept()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cutOff.Load() {
			// Nothing reaches the server through a partition.
			p.track(c)
			continue
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c)
		p.track(u)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

// pipe copies from src to dst until either closes; while cut, what it
// reads is dropped.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cutOff.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			// A close does not cross a partition either: the other end
			// learns of it only when sever runs.
			if !p.cutOff.Load() {
				dst.Close()
			}
			return
		}
	}
}

func (p *proxy) cut() { p.cutOff.Store(true) }

func (p *proxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
