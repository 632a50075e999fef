package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
	cluster *pgCluster
}

func (s *server) close() error {
	if s == nil || s.cluster == nil {
		return nil
	}
	return s.cluster.stop()
}

// findServer picks the server the demo runs on: databaseURL if set, else
// localURL if it answers, else a throwaway cluster made with the local
// initdb.
func findServer(ctx context.Context, databaseURL, localURL string, logger *slog.Logger) (*server, error) {
	if databaseURL != "" {
		if err := ping(ctx, databaseURL); err != nil {
			return nil, fmt.Errorf("connect to the database URL given: %w", err)
		}
		return &server{adminURL: databaseURL, source: "the database URL given (DATABASE_URL)"}, nil
	}
	if localURL == "" {
		localURL = DefaultLocalURL
	}
	err := ping(ctx, localURL)
	if err == nil {
		return &server{adminURL: localURL, source: "the local server at " + hostPort(localURL)}, nil
	}
	logger.Info("no usable PostgreSQL at the local address; starting a throwaway cluster", "address", hostPort(localURL), "reason", err)
	c, err := startCluster(ctx, logger)
	if err != nil {
		return nil, fmt.Errorf("no database URL, %s does not answer, and a throwaway cluster could not start: %w", hostPort(localURL), err)
	}
	return &server{adminURL: c.url(), source: "a throwaway cluster in " + c.dir, cluster: c}, nil
}

// hostPort returns host:port of a URL for messages; never the password.
func hostPort(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", err)
	}
	cfg.ConnectTimeout = 3 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// pgCluster is a throwaway PostgreSQL cluster in a temporary folder,
// listening on a free loopback port, run by this process as a child.
type pgCluster struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, set before done is closed
}

func (c *pgCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// postgresBinDir finds the folder holding initdb and postgres: the newest
// /usr/lib/postgresql/N/bin, else the folder of initdb on PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", errors.New("initdb not found under /usr/lib/postgresql/*/bin nor on PATH")
	}
	return filepath.Dir(p), nil
}

// versionOf reads N from /usr/lib/postgresql/N/bin; 0 if it is not a number.
func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// runAs is the unprivileged account a cluster runs under when this process
// is root (PostgreSQL refuses to run as root).
type runAs struct {
	name     string
	uid, gid uint32
}

// clusterUser picks the account: none when not root, else "postgres" if it
// exists, else "nobody".
func clusterUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &runAs{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and neither user postgres nor nobody exists to run PostgreSQL")
}

func (r *runAs) apply(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT}
	if r != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.gid}
		cmd.Env = append(os.Environ(), "HOME="+cmd.Dir)
	}
}

// startCluster runs initdb in a new temporary folder and starts postgres
// on a free port of 127.0.0.1, without a Unix socket. It returns once the
// server accepts connections.
func startCluster(ctx context.Context, logger *slog.Logger) (c *pgCluster, err error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	as, err := clusterUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-demo-pg-")
	if err != nil {
		return nil, fmt.Errorf("make temporary folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if as != nil {
		if err := os.Chown(dir, int(as.uid), int(as.gid)); err != nil {
			return nil, fmt.Errorf("hand %s to user %s: %w", dir, as.name, err)
		}
	}
	data := filepath.Join(dir, "data")
	var out bytes.Buffer
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir = dir
	initdb.Stdout, initdb.Stderr = &out, &out
	as.apply(initdb)
	if err := initdb.Run(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, lastLines(out.String(), 5))
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create server log: %w", err)
	}
	defer logFile.Close()
	// The server is a direct child, not daemonized by pg_ctl, so that stop
	// can wait for it and the kernel stops it (Pdeathsig) if we die.
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "max_connections=50",
		"-c", "shared_buffers=32MB")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	as.apply(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c = &pgCluster{dir: dir, port: port, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if perr := ping(ctx, c.url()); perr == nil {
			break
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			_ = c.stop()
			return nil, fmt.Errorf("postgres did not accept connections: %w", perr)
		}
		select {
		case <-c.done:
			log, _ := os.ReadFile(logPath)
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited: %v: %s", c.err, lastLines(string(log), 5))
		case <-time.After(200 * time.Millisecond):
		}
	}
	logger.Info("throwaway PostgreSQL cluster started", "dir", dir, "port", port, "user", userName(as))
	return c, nil
}

func userName(r *runAs) string {
	if r == nil {
		return "(current user)"
	}
	return r.name
}

// stop shuts the server down (fast shutdown, then kill after 20s) and
// removes its folder.
func (c *pgCluster) stop() error {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove cluster folder: %w", err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
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
