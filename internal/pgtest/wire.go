package pgtest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
)

// Wire stands between a test's sessions and the server and counts the
// transactions the server ended on them: each ReadyForQuery reporting the
// session idle, apart from the one that ends the startup. (A statement
// described or prepared outside a transaction ends one too.) It needs
// sslmode=disable, as ServerURL has.
type Wire struct {
	ln     net.Listener
	server string
	xacts  atomic.Int64
}

// NewWire starts a counter in front of the server; the test's end stops
// it.
func NewWire(t testing.TB) *Wire {
	t.Helper()
	su, err := url.Parse(ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &Wire{ln: ln, server: su.Host}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go w.session(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return w
}

// Transactions returns the count so far; Reset zeroes it.
func (w *Wire) Transactions() int64 { return w.xacts.Load() }

// Reset zeroes the count.
func (w *Wire) Reset() { w.xacts.Store(0) }

// URL returns the URL dsn (one of the server's: DB.URL, or one naming
// another role) through the counter.
func (w *Wire) URL(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = w.ln.Addr().String()
	return u.String()
}

func (w *Wire) session(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", w.server)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	r := bufio.NewReader(server)
	first := true
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 {
			return
		}
		msg := make([]byte, 5+n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(r, msg[5:]); err != nil {
			return
		}
		if hdr[0] == 'Z' && n == 1 && msg[5] == 'I' {
			if !first {
				w.xacts.Add(1)
			}
			first = false
		}
		if _, err := client.Write(msg); err != nil {
			return
		}
	}
}
