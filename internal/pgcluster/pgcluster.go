// Package pgcluster starts a throwaway PostgreSQL cluster: initdb in a
// temporary folder, then postgres as a child of this process on a free
// loopback port, without a Unix socket. The demo runs on one when no
// server answers; the CDC tests start theirs with wal_level = logical.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options are the cluster's settings.
type Options struct {
	// Prefix names the temporary folder (default "outbox-pg-").
	Prefix string
	// Settings are -c name=value server settings, over the defaults
	// (loopback only, fsync off, 60 connections, 32MB shared buffers).
	Settings map[string]string
	// WALSegmentMB is initdb's --wal-segsize (default 16); a small
	// segment lets a test push a slot past max_slot_wal_keep_size by
	// writing a few megabytes.
	WALSegmentMB int
}

// Cluster is a running throwaway server in a folder that Stop removes.
type Cluster struct {
	Dir  string
	Port int
	// User is the account the server runs as ("" for this process's).
	User string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, set before done is closed
}

// Exited is closed once the server's process has exited.
func (c *Cluster) Exited() <-chan struct{} { return c.done }

// Pid is the server's process id.
func (c *Cluster) Pid() int { return c.cmd.Process.Pid }

// URL connects to database db as the superuser postgres.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// runAs is the unprivileged account the server runs as when this process
// is root, which PostgreSQL refuses to be.
type runAs struct {
	name string
	cred *syscall.Credential
}

// prepare finds the server's programs and the account to run them as, and
// makes a temporary folder that account owns, named with prefix.
func prepare(prefix string) (bin string, as *runAs, dir string, err error) {
	if bin, err = BinDir(); err != nil {
		return "", nil, "", err
	}
	if as, err = account(); err != nil {
		return "", nil, "", err
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, "", fmt.Errorf("make temporary folder: %w", err)
	}
	if as != nil {
		if err := os.Chown(dir, int(as.cred.Uid), int(as.cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, "", fmt.Errorf("hand %s to user %s: %w", dir, as.name, err)
		}
	}
	return bin, as, dir, nil
}

// Start runs initdb and postgres and returns once the server accepts
// connections.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Prefix == "" {
		o.Prefix = "outbox-pg-"
	}
	bin, as, dir, err := prepare(o.Prefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	data := filepath.Join(dir, "data")
	if err := initdb(ctx, bin, dir, data, o, as); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	c, err = startServer(bin, dir, data, port, o, as)
	if err != nil {
		return nil, err
	}
	if err := c.wait(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

func initdb(ctx context.Context, bin, dir, data string, o Options, as *runAs) error {
	args := []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"}
	if o.WALSegmentMB > 0 {
		args = append(args, "--wal-segsize="+strconv.Itoa(o.WALSegmentMB))
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
	as.apply(cmd, dir)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, LastLines(out.String(), 5))
	}
	return nil
}

// startServer starts postgres as a direct child, not daemonized by
// pg_ctl, so that Stop can wait for it and the kernel stops it
// (Pdeathsig) if this process dies.
func startServer(bin, dir, data string, port int, o Options, as *runAs) (*Cluster, error) {
	settings := map[string]string{
		"listen_addresses": "127.0.0.1", "port": strconv.Itoa(port), "unix_socket_directories": "",
		"fsync": "off", "max_connections": "60", "shared_buffers": "32MB",
	}
	maps.Copy(settings, o.Settings)
	args := []string{"-D", data}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, fmt.Errorf("create server log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logFile, logFile
	as.apply(cmd, dir)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{Dir: dir, Port: port, cmd: cmd, done: make(chan struct{})}
	if as != nil {
		c.User = as.name
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	return c, nil
}

// wait returns once the server accepts connections, or fails when it
// exits or does not answer within limit.
func (c *Cluster) wait(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		perr := Ping(ctx, c.URL("postgres"))
		if perr == nil {
			return nil
		}
		select {
		case <-c.done:
			log, _ := os.ReadFile(filepath.Join(c.Dir, "postgres.log"))
			return fmt.Errorf("postgres exited: %v: %s", c.err, LastLines(string(log), 5))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = c.Stop()
			return fmt.Errorf("postgres did not accept connections: %w", perr)
		}
	}
}

// Stop shuts the server down (fast shutdown, then kill after 30 s) and
// removes its folder.
func (c *Cluster) Stop() error {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("remove cluster folder: %w", err)
	}
	return nil
}

// BinDir finds the folder holding initdb and postgres: the newest
// /usr/lib/postgresql/N/bin, else the folder of initdb on PATH.
func BinDir() (string, error) {
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

// account picks the server's account: none when not root, else
// "postgres" if it exists, else "nobody".
func account() (*runAs, error) {
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
		if err1 == nil && err2 == nil {
			return &runAs{name: name, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
		}
	}
	return nil, errors.New("running as root and neither user postgres nor nobody exists to run PostgreSQL")
}

func (r *runAs) apply(cmd *exec.Cmd, home string) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT}
	if r != nil {
		cmd.SysProcAttr.Credential = r.cred
		cmd.Env = append(os.Environ(), "HOME="+home)
	}
}

// Ping connects to u and pings it, within 3 seconds.
func Ping(ctx context.Context, u string) error {
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

// FreePort is a TCP port of 127.0.0.1 free at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LastLines is the last n lines of s, joined with " | " for a log line.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
