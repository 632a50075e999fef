// Package cdctest starts throwaway PostgreSQL clusters with wal_level =
// logical for the cdc tests and benchmark: the shared test server runs
// with wal_level = replica, and a slot's WAL limits are server settings a
// test must choose.
package cdctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running throwaway PostgreSQL server, a child of this
// process, in a temporary folder that Stop removes.
type Cluster struct {
	Dir  string
	Port int
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// URL connects to database db as the superuser postgres.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Options are the server settings a test chooses.
type Options struct {
	// Settings are extra -c name=value settings.
	Settings map[string]string
	// WALSegmentMB is initdb's --wal-segsize (default 16); a small
	// segment lets a test push a slot past max_slot_wal_keep_size by
	// writing a few megabytes.
	WALSegmentMB int
}

// Start runs initdb and postgres with wal_level = logical on a free
// loopback port and returns once the server accepts connections.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-cdc-pg-")
	if err != nil {
		return nil, fmt.Errorf("make temporary folder: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("hand %s to the server's user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	args := []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"}
	if o.WALSegmentMB > 0 {
		args = append(args, "--wal-segsize="+strconv.Itoa(o.WALSegmentMB))
	}
	var out bytes.Buffer
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	initdb.Dir, initdb.Stdout, initdb.Stderr = dir, &out, &out
	apply(initdb, cred, dir)
	if err := initdb.Run(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out.String())
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	settings := map[string]string{
		"listen_addresses": "127.0.0.1", "port": strconv.Itoa(port), "unix_socket_directories": "",
		"fsync": "off", "max_connections": "60", "shared_buffers": "32MB",
		"wal_level": "logical", "max_replication_slots": "40", "max_wal_senders": "20",
	}
	for k, v := range o.Settings {
		settings[k] = v
	}
	pargs := []string{"-D", data}
	for _, k := range sortedKeys(settings) {
		pargs = append(pargs, "-c", k+"="+settings[k])
	}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, fmt.Errorf("create server log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), pargs...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logFile, logFile
	apply(cmd, cred, dir)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c = &Cluster{Dir: dir, Port: port, cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		perr := ping(ctx, c.URL("postgres"))
		if perr == nil {
			return c, nil
		}
		select {
		case <-c.done:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres exited: %v: %s", c.err, log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = c.Stop()
			return nil, fmt.Errorf("postgres did not accept connections: %w", perr)
		}
	}
}

// Stop shuts the server down and removes its folder.
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
	return os.RemoveAll(c.Dir)
}

func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
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

func version(d string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
	return v
}

// credential is the account the server runs as when this process is root,
// which PostgreSQL refuses to be.
func credential() (*syscall.Credential, error) {
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
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root and neither user postgres nor nobody exists to run PostgreSQL")
}

func apply(cmd *exec.Cmd, cred *syscall.Credential, home string) {
	// The kernel stops the server if the test process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT, Credential: cred}
	if cred != nil {
		cmd.Env = append(os.Environ(), "HOME="+home)
	}
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
