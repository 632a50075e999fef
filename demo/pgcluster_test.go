package demo

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/pgcluster"
)

// TestThrowawayCluster points the demo at a local address nothing answers
// on, so it makes its own cluster with initdb, runs the pipeline on it,
// and removes every trace on Close.
func TestThrowawayCluster(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		t.Fatalf("this test needs the PostgreSQL server binaries: %v", err)
	}
	before := runtime.NumGoroutine()
	port, err := pgcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.DatabaseURL = ""
	o.LocalURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
	o.Database = "outbox_demo"
	p, _ := start(t, o)
	c := p.srv.cluster
	if c == nil {
		t.Fatalf("no throwaway cluster; the demo used %s", p.srv.source)
	}
	if !strings.Contains(p.DatabaseURL(), "127.0.0.1:"+strconv.Itoa(c.Port)+"/outbox_demo") {
		t.Errorf("demo database URL %s is not on the cluster's port %d", p.DatabaseURL(), c.Port)
	}
	// Runs as an unprivileged user when we are root.
	uid := procUID(t, c.Pid())
	if os.Geteuid() == 0 {
		if uid == 0 {
			t.Errorf("postgres runs as root")
		}
		if u, err := user.LookupId(strconv.Itoa(uid)); err != nil || (u.Username != "postgres" && u.Username != "nobody") {
			t.Errorf("postgres runs as uid %d (%v, %v), want postgres or nobody", uid, u, err)
		}
	} else if uid != os.Geteuid() {
		t.Errorf("postgres runs as uid %d, want ours %d", uid, os.Geteuid())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var listen, sockets string
	if err := p.pool.QueryRow(ctx, `SELECT current_setting('listen_addresses'), current_setting('unix_socket_directories')`).Scan(&listen, &sockets); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1" || sockets != "" {
		t.Errorf("listen_addresses %q, unix_socket_directories %q; want loopback TCP only", listen, sockets)
	}
	assertLoopbackOnly(t, "throwaway postgres", c.Port)
	eventually(t, 30*time.Second, "events published on the throwaway cluster", func() error {
		if n := queryInt(t, p, `SELECT count(*) FROM search_index`); n < 10 {
			return fmt.Errorf("%d indexed", n)
		}
		return nil
	})
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-c.Exited():
	default:
		t.Error("postgres still running after Close")
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster folder %s left behind (%v)", c.Dir, err)
	}
	assertGoroutinesBack(t, before)
}

func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read process status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatal("no Uid line in process status")
	return -1
}

func TestFindServerPrefersTheURLGiven(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A URL that does not answer is an error, not a fallback.
	port, _ := pgcluster.FreePort()
	bad := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if _, err := findServer(ctx, bad, DefaultLocalURL, discard()); err == nil {
		t.Error("findServer accepted a database URL nothing answers on")
	}
	s, err := findServer(ctx, "", testOptions().DatabaseURL, discard())
	if err != nil {
		t.Fatalf("findServer with a live local URL: %v", err)
	}
	if s.cluster != nil {
		t.Error("findServer started a cluster although the local server answers")
	}
}
