package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
)

// DefaultLocalURL is the server the demo tries when no database URL is
// given: the usual local PostgreSQL with trust authentication.
const DefaultLocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// server is a PostgreSQL server the demo may create its database on, and
// what must be stopped when the demo ends.
type server struct {
	// adminURL connects to a maintenance database as a user that may
	// create databases.
	adminURL string
	// source says in plain words where the server came from.
	source  string
	cluster *pgcluster.Cluster
}

func (s *server) close() error {
	if s == nil || s.cluster == nil {
		return nil
	}
	return s.cluster.Stop()
}

// findServer picks the server the demo runs on: databaseURL if set, else
// localURL if it answers, else a throwaway cluster made with the local
// initdb.
func findServer(ctx context.Context, databaseURL, localURL string, logger *slog.Logger) (*server, error) {
	if databaseURL != "" {
		if err := pgcluster.Ping(ctx, databaseURL); err != nil {
			return nil, fmt.Errorf("connect to the database URL given: %w", err)
		}
		return &server{adminURL: databaseURL, source: "the database URL given (DATABASE_URL)"}, nil
	}
	if localURL == "" {
		localURL = DefaultLocalURL
	}
	err := pgcluster.Ping(ctx, localURL)
	if err == nil {
		return &server{adminURL: localURL, source: "the local server at " + hostPort(localURL)}, nil
	}
	logger.Info("no usable PostgreSQL at the local address; starting a throwaway cluster", "address", hostPort(localURL), "reason", err)
	c, err := startCluster(ctx, logger)
	if err != nil {
		return nil, fmt.Errorf("no database URL, %s does not answer, and a throwaway cluster could not start: %w", hostPort(localURL), err)
	}
	return &server{adminURL: c.URL("postgres"), source: "a throwaway cluster in " + c.Dir, cluster: c}, nil
}

// hostPort returns host:port of a URL for messages; never the password.
func hostPort(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// startCluster starts the demo's throwaway cluster.
func startCluster(ctx context.Context, logger *slog.Logger) (*pgcluster.Cluster, error) {
	c, err := pgcluster.Start(ctx, pgcluster.Options{Prefix: "outbox-demo-pg-", Settings: map[string]string{"max_connections": "50"}})
	if err != nil {
		return nil, err
	}
	user := c.User
	if user == "" {
		user = "(current user)"
	}
	logger.Info("throwaway PostgreSQL cluster started", "dir", c.Dir, "port", c.Port, "user", user)
	return c, nil
}

// withDatabase returns u with its database replaced by name. u may be a URL
// or a key=value DSN.
func withDatabase(u, name string) (string, error) {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		p, err := url.Parse(u)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		p.Path = "/" + name
		p.RawPath = ""
		return p.String(), nil
	}
	// key=value: a later dbname overrides an earlier one.
	return strings.TrimSpace(u) + " dbname=" + quoteDSNValue(name), nil
}

func quoteDSNValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
