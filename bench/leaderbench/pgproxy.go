package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// pgProxy stands between the exporters and the PostgreSQL server and
// counts, per replica (each reaches the server through a listener of
// its own) and kind of session (told by its application_name), the
// sessions opened and the transactions the server ended on them: each
// ReadyForQuery reporting the session idle ends one, a statement sent
// outside a transaction (a ping) included, apart from the first, which
// ends the startup. This is the server's count of the exporters' work in
// transactions, exact where pg_stat_database's counters mix in every
// other session on the databases and are flushed late. It also counts
// the bytes each way and follows each session's backend process for its
// CPU time.
type pgProxy struct {
	lns    []net.Listener
	server string

	mu              sync.Mutex
	sessions, xacts map[key]int64
	// bytes each way on the wire: to the server, from it.
	sent, received map[key]int64
	// cpu follows the sessions' backend processes.
	cpu *sessionCPU
	// trace, when set, gets a line per session closed: its kind,
	// database, when it opened and how long it lived.
	trace io.Writer
}

// key is what the proxy counts by: the replica whose listener the
// session came through, and the session's kind.
type key struct {
	replica int
	kind    string
}

// Kinds of sessions.
const (
	kindLease = "lease"
	kindPool  = "pool"
	kindOther = "other"
)

// newPGProxy listens for replicas replicas, each on a port of its own.
func newPGProxy(server string, replicas int) (*pgProxy, error) {
	p := &pgProxy{server: server, cpu: newSessionCPU(200 * time.Millisecond)}
	for i := 0; i < replicas; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.close()
			return nil, err
		}
		p.lns = append(p.lns, ln)
	}
	p.reset()
	for i, ln := range p.lns {
		go p.serve(ln, i)
	}
	return p, nil
}

// addr is the address replica i reaches the server at.
func (p *pgProxy) addr(i int) string { return p.lns[i].Addr().String() }

func (p *pgProxy) close() {
	for _, ln := range p.lns {
		ln.Close()
	}
	p.cpu.close()
}

// reset zeroes the counts; take returns them.
func (p *pgProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessions, p.xacts = map[key]int64{}, map[key]int64{}
	p.sent, p.received = map[key]int64{}, map[key]int64{}
	p.cpu.take()
}

// wire is what the proxy counted of an arm.
type wire struct {
	sessions, xacts map[key]int64
	sent, received  map[key]int64
	// cpuNanos is the CPU time of each session's backend, largest first.
	cpuNanos map[key][]int64
}

func (p *pgProxy) take() wire {
	cpu := p.cpu.take()
	p.mu.Lock()
	defer p.mu.Unlock()
	return wire{sessions: p.sessions, xacts: p.xacts, sent: p.sent, received: p.received, cpuNanos: cpu}
}

// counting counts the bytes written through it to the proxy's tally.
type counting struct {
	w io.Writer
	p *pgProxy
	k key
}

func (c counting) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.mu.Lock()
	c.p.sent[c.k] += int64(n)
	c.p.mu.Unlock()
	return n, err
}

func (p *pgProxy) serve(ln net.Listener, replica int) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.session(c, replica)
	}
}

func (p *pgProxy) session(client net.Conn, replica int) {
	defer client.Close()
	server, err := net.Dial("tcp", p.server)
	if err != nil {
		return
	}
	defer server.Close()
	app, db, err := startup(client, server)
	if err != nil {
		return
	}
	opened := time.Now()
	kind := kindOther
	switch {
	case strings.HasPrefix(app, "outbox_exporter leader"):
		kind = kindLease
	case app == "outbox_exporter":
		kind = kindPool
	}
	k := key{replica: replica, kind: kind}
	p.mu.Lock()
	p.sessions[k]++
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(counting{w: server, p: p, k: k}, client)
		server.Close()
	}()
	p.backend(bufio.NewReader(server), client, k)
	if p.trace != nil {
		p.mu.Lock()
		fmt.Fprintf(p.trace, "%s %s %s opened %s lived %v\n", time.Now().Format("15:04:05.000"), kind, db, opened.Format("15:04:05.000"), time.Since(opened).Round(time.Millisecond))
		p.mu.Unlock()
	}
}

// startup forwards the client's startup (after any SSL or GSS request,
// which the server declines when it does not offer them) and returns its
// application_name and database.
func startup(client, server net.Conn) (app, db string, err error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return "", "", err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		if n < 8 || n > 1<<16 {
			return "", "", errors.New("startup: bad length")
		}
		body := make([]byte, n-8)
		if _, err := io.ReadFull(client, body); err != nil {
			return "", "", err
		}
		if _, err := server.Write(append(hdr[:], body...)); err != nil {
			return "", "", err
		}
		if code == 80877103 || code == 80877104 { // SSLRequest, GSSENCRequest
			var answer [1]byte
			if _, err := io.ReadFull(server, answer[:]); err != nil {
				return "", "", err
			}
			if answer[0] != 'N' {
				return "", "", fmt.Errorf("startup: the server accepted encryption (%q); the bench needs sslmode=disable", answer[0])
			}
			if _, err := client.Write(answer[:]); err != nil {
				return "", "", err
			}
			continue
		}
		kv := bytes.Split(body, []byte{0})
		for i := 0; i+1 < len(kv); i += 2 {
			switch string(kv[i]) {
			case "application_name":
				app = string(kv[i+1])
			case "database":
				db = string(kv[i+1])
			}
		}
		return app, db, nil
	}
}

// backend forwards the server's messages to the client and counts the
// transactions they end.
func (p *pgProxy) backend(r *bufio.Reader, client net.Conn, k key) {
	first := true
	w := bufio.NewWriterSize(client, 64<<10)
	var hdr [5]byte
	buf := make([]byte, 0, 8192)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 {
			return
		}
		buf = append(buf[:0], hdr[:]...)
		buf = append(buf, make([]byte, n)...)
		if _, err := io.ReadFull(r, buf[5:]); err != nil {
			return
		}
		if hdr[0] == 'K' && n == 8 { // BackendKeyData: the backend's PID
			p.cpu.add(int(binary.BigEndian.Uint32(buf[5:9])), k)
		}
		p.mu.Lock()
		p.received[k] += int64(len(buf))
		p.mu.Unlock()
		if hdr[0] == 'Z' && n == 1 && buf[5] == 'I' {
			if first {
				first = false
			} else {
				p.mu.Lock()
				p.xacts[k]++
				p.mu.Unlock()
			}
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		// Whatever the server sent so far goes on before the next read
		// can block; a result of many rows goes in large writes.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}
