// Package pgtest gives tests a throwaway PostgreSQL database on the real
// server: DATABASE_URL if set, else postgres://postgres@127.0.0.1:5432.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ServerURL is the server tests use.
func ServerURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// DB is a database created for one test and dropped when it ends.
type DB struct {
	Name string
	// URL connects to the database as the server's superuser.
	URL string
	// Admin is a read-write pool for setting up fixtures.
	Admin *pgxpool.Pool
}

// New creates a database with a unique name and registers its drop.
func New(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "oxt_" + hex.EncodeToString(b)
	server, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v (is PostgreSQL running? pg_ctlcluster --skip-systemctl-redirect 15 main start)", ServerURL(), err)
	}
	defer server.Close(ctx)
	if _, err := server.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	u, err := url.Parse(ServerURL())
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", ServerURL(), err)
	}
	u.Path = "/" + name
	db := &DB{Name: name, URL: u.String()}
	db.Admin, err = pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(func() { db.drop(t) })
	return db
}

func (db *DB) drop(t testing.TB) {
	db.Admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Errorf("pgtest: drop %s: %v", db.Name, err)
		return
	}
	defer server.Close(ctx)
	if _, err := server.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop %s: %v", db.Name, err)
	}
}

// Exec runs setup SQL as the superuser and fails the test on error.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := db.Admin.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: exec %q: %v", sql, err)
	}
}

// Begin opens a session of its own on the database (as an application or
// a relay would hold one) and begins a transaction in it; the test's
// cleanup ends both. Tests hold locks or uncommitted writes in it.
func (db *DB) Begin(t testing.TB) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}
