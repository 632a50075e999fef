package database

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/collectors"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// Servers shares what the collectors read about a server among the
// configured databases it serves: whether it is in recovery and how far
// its replay is behind are facts of the server, the same for each of its
// databases, so a scrape reads them once per server (host and port, and
// any fallback hosts of the DSN) instead of once per database. Each
// database still has its own series, and its collection its own success.
type Servers struct {
	mu    sync.Mutex
	byKey map[string]*server
	ride  time.Duration // the collectors' (tests wait longer)
}

// NewServers returns an empty set of servers.
func NewServers() *Servers { return &Servers{byKey: map[string]*server{}, ride: ride} }

// server is one server's shared reads. The first database added reads
// for all of them.
type server struct {
	db   pg.Beginner
	mu   sync.Mutex
	last *reading
}

// reading is one read of a server's State.
type reading struct {
	collection uint64
	scraped    bool // in a collection (collectors.CollectionOf)
	done       chan struct{}
	st         State
	err        error
}

// Collector returns the collector of database name, reading through db
// (a pool from pg.Open); the collectors of databases on one server share
// its reads, made through the first of them added: add first those whose
// outboxes every scrape collects, so that the read goes in the round of
// their collections. A db that is not a pool reads alone.
func (s *Servers) Collector(name string, db pg.Beginner) *Collector {
	c := NewCollector(name, db)
	c.ride = s.ride
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return c
	}
	key := serverKey(pool.Config())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey[key] == nil {
		s.byKey[key] = &server{db: db}
	}
	c.server = s.byKey[key]
	return c
}

// serverKey names the server a pool's sessions reach: its host and port,
// then the fallbacks a multi-host DSN may connect to instead, sorted.
// Only databases whose DSNs name the same hosts share a reading, so a
// database whose sessions may land on another server reads its own.
func serverKey(pc *pgxpool.Config) string {
	cc := pc.ConnConfig
	first := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	var others []string
	for _, f := range cc.Fallbacks {
		others = append(others, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
	}
	slices.Sort(others)
	return strings.Join(append([]string{first}, others...), ",")
}

// read returns the server's State for a collector reading through own:
// a read of the same collection, or one still under way, is shared, else
// this call reads through the server's first database. When the shared
// read failed, a collector of another database reads through its own, so
// that one database's trouble fails only its own collection.
func (s *server) read(ctx context.Context, own pg.Beginner, wait time.Duration) (State, error) {
	id, scraped := collectors.CollectionOf(ctx)
	s.mu.Lock()
	r := s.last
	if r == nil || !(r.scraped && scraped && r.collection == id || !r.ended()) {
		r = &reading{collection: id, scraped: scraped, done: make(chan struct{})}
		s.last = r
		s.mu.Unlock()
		r.st, r.err = read(ctx, s.db, wait)
		close(r.done)
	} else {
		s.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return State{}, ctx.Err()
		}
	}
	if r.err != nil && own != s.db {
		return Read(ctx, own)
	}
	return r.st, r.err
}

func (r *reading) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}
