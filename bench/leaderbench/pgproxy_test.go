package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// TestProxyCountsEachReplica: through the bench's proxy, a session on
// each replica's listener, of a kind told by application_name; the
// proxy counts each one's transactions (statements sent outside a
// transaction, one each), bytes, and its backend's CPU time, which is
// larger for the session that ran a statement that works the CPU, and
// which the whole server's CPU time covers.
func TestProxyCountsEachReplica(t *testing.T) {
	db := pgtest.New(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPGProxy(u.Host, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	postmaster, err := postmasterPID(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	serverBefore, err := serverTicks(postmaster)
	if err != nil {
		t.Fatal(err)
	}
	session := func(replica int, app string, stmts ...string) {
		t.Helper()
		cu, err := url.Parse(via(db.URL, p.addr(replica)))
		if err != nil {
			t.Fatal(err)
		}
		q := cu.Query()
		q.Set("application_name", app)
		q.Set("default_query_exec_mode", "simple_protocol")
		// pgx reads a space in a URL as %20, not +.
		cu.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		c, err := pgx.Connect(ctx, cu.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		for _, s := range stmts {
			if _, err := c.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	const heavy = "SELECT count(*) FROM generate_series(1, 3000000)"
	session(0, "outbox_exporter", "SELECT 1", "SELECT 2", "SELECT 3", heavy)
	session(1, "outbox_exporter leader r1", "SELECT 1")
	// The sessions' backends exit after their clients close; their last
	// samples were taken while they lived.
	w := p.take()
	pool, lease := key{0, kindPool}, key{1, kindLease}
	if w.xacts[pool] != 4 || w.xacts[lease] != 1 || w.sessions[pool] != 1 || w.sessions[lease] != 1 || len(w.xacts) != 2 {
		t.Errorf("transactions %v, sessions %v; want 4 and 1 on replica 0's pool session, 1 and 1 on replica 1's lease session, nothing else", w.xacts, w.sessions)
	}
	if w.sent[pool] <= w.sent[lease] || w.received[pool] <= w.received[lease] || w.sent[lease] <= 0 || w.received[lease] <= 0 {
		t.Errorf("bytes sent %v, received %v; want some on each session, more on the one of four statements", w.sent, w.received)
	}
	if len(w.cpuNanos[pool]) != 1 || len(w.cpuNanos[lease]) != 1 {
		t.Fatalf("CPU by session %v; want one session of each", w.cpuNanos)
	}
	hot, idle := w.cpuNanos[pool][0], w.cpuNanos[lease][0]
	if hot < 20e6 || hot < 2*idle {
		t.Errorf("the session that counted 3M rows: %v of CPU, the other %v; want at least 20ms and twice the other's", time.Duration(hot), time.Duration(idle))
	}
	serverAfter, err := serverTicks(postmaster)
	if err != nil {
		t.Fatal(err)
	}
	if got := (serverAfter - serverBefore) * 1e9 / clockTicks; got < hot/2 {
		t.Errorf("the whole server's CPU grew by %v, under half of one of its sessions' %v", time.Duration(got), time.Duration(hot))
	}
}
