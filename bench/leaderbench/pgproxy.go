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
// counts, per kind of session (told by its application_name), the
// sessions opened and the transactions the server ended on them: each
// ReadyForQuery reporting the session idle ends one, a statement sent
// outside a transaction (a ping) included, apart from the first, which
// ends the startup. This is the server's count of the exporters' work in
// transactions, exact where pg_stat_database's counters mix in every
// other session on the databases and are flushed late.
type pgProxy struct {
	ln     net.Listener
	server string

	mu              sync.Mutex
	sessions, xacts map[string]int64
	// trace, when set, gets a line per session closed: its kind,
	// database, when it opened and how long it lived.
	trace io.Writer
}

// Kinds of sessions.
const (
	kindLease = "lease"
	kindPool  = "pool"
	kindOther = "other"
)

func newPGProxy(server string) (*pgProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &pgProxy{ln: ln, server: server}
	p.reset()
	go p.serve()
	return p, nil
}

func (p *pgProxy) addr() string { return p.ln.Addr().String() }

func (p *pgProxy) close() { p.ln.Close() }

// reset zeroes the counts; take returns them.
func (p *pgProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessions, p.xacts = map[string]int64{}, map[string]int64{}
}

func (p *pgProxy) take() (sessions, xacts map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions, p.xacts
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.session(c)
	}
}

func (p *pgProxy) session(client net.Conn) {
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
	p.mu.Lock()
	p.sessions[kind]++
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	p.backend(bufio.NewReader(server), client, kind)
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
func (p *pgProxy) backend(r *bufio.Reader, client net.Conn, kind string) {
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
		if hdr[0] == 'Z' && n == 1 && buf[5] == 'I' {
			if first {
				first = false
			} else {
				p.mu.Lock()
				p.xacts[kind]++
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
