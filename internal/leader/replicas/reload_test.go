package replicas

import (
	"context"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/pgtest"
)

// secondJob is a reconcile job a reload adds.
const secondJob = `
  search_index_2:
    schedule: "@every 1s"
    window: 24h
    grace: 2m
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: search, table: public.search_index, key: message_id, version: version}`

// TestReloadKeepsLeadership: two exporter processes; the leader reloads
// (SIGHUP, then POST /-/reload). A reload that keeps a task keeps its
// term: the same lease session holds the lock (same server process), no
// second term begins, the other replica never leads it, and the runs go
// on. A task the reload adds is taken; a task it drops is released and
// the other replica takes it, the two terms apart.
func TestReloadKeepsLeadership(t *testing.T) {
	a, b := fixture(t)
	bin := build(t)
	r1 := start(t, bin, "r1", a, b, "")
	waitUntil(t, "r1 leads", func() bool { ok, _ := r1.leads(); return ok })
	r2 := start(t, bin, "r2", a, b, "")
	if l := theLeader(t, []*replica{r1, r2}); l != r1 {
		t.Fatalf("%s leads, want r1", l.name)
	}
	pid := leaseSession(t, a, r1)

	// SIGHUP: another outbox deadline (an unrelated change) and a second
	// job.
	cfg := readFile(t, r1.cfg)
	cfg = strings.Replace(cfg, "deadline: 5m", "deadline: 6m", 1)
	cfg = strings.Replace(cfg, "\nreconcile:", "\nreconcile:"+secondJob, 1)
	writeFile(t, r1.cfg, cfg)
	if err := syscall.Kill(r1.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "r1 reloads", func() bool { return r1.count("config loaded") == 2 })
	reloaded := time.Now()
	waitUntil(t, "r1 leads the added job", func() bool { return r1.leadsTask("reconcile/search_index_2") })
	waitUntil(t, "r1 runs "+task+" 3 times after the reload", func() bool { return r1.runsSince("search_index", reloaded) >= 3 })
	if ok, _ := r1.leads(); !ok {
		t.Fatal("r1 no longer leads after a reload that kept the task")
	}
	if n := r1.termsOf(task); n != 1 {
		t.Fatalf("r1 began %d terms of %s across the reload, want 1", n, task)
	}
	if n := r2.termsOf(task); n != 0 {
		t.Fatalf("r2 led %s %d times while r1 reloaded", task, n)
	}
	if got := leaseSession(t, a, r1); got != pid {
		t.Fatalf("the reload replaced r1's lease session (server process %d, then %d)", pid, got)
	}
	if r2.runs() != 0 {
		t.Fatalf("r2 ran the job %d times", r2.runs())
	}

	// POST /-/reload without the first job: r1 releases it, r2 takes it.
	writeFile(t, r1.cfg, strings.Replace(cfg, "\n  search_index:\n", "\n  search_index_3:\n", 1))
	resp, err := http.Post("http://"+r1.addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /-/reload: %s", resp.Status)
	}
	waitUntil(t, "r2 takes the job r1 dropped", func() bool { ok, _ := r2.leads(); return ok })
	if r1.leadsTask(task) || !r1.leadsTask("reconcile/search_index_2") {
		t.Fatal("after dropping a job r1 leads it still, or no longer leads the other")
	}
	if got := leaseSession(t, a, r1); got != pid {
		t.Fatalf("the second reload replaced r1's lease session (server process %d, then %d)", pid, got)
	}
	if o := overlap(terms([]*replica{r1, r2}, nil)); o != "" {
		t.Fatalf("two replicas led %s at once: %s", task, o)
	}
	waitUntil(t, "r2 runs the job", func() bool { return r2.runs() >= 1 })
}

// leaseSession returns the server process of r's lease session, found by
// its application_name, which ends in r's port.
func leaseSession(t *testing.T, db *pgtest.DB, r *replica) int {
	t.Helper()
	port := r.addr[strings.LastIndex(r.addr, ":"):]
	var pid int
	var n int
	err := db.Admin.QueryRow(context.Background(), `SELECT count(*), coalesce(min(pid), 0) FROM pg_stat_activity
		WHERE datname = $1 AND application_name LIKE 'outbox_exporter leader %' AND application_name LIKE '%' || $2`, db.Name, port).Scan(&n, &pid)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%s has %d lease sessions, want 1", r.name, n)
	}
	return pid
}

// runsSince counts the runs of job the replica completed after since.
func (r *replica) runsSince(job string, since time.Time) int {
	n := 0
	for _, e := range r.events() {
		if e.Msg == "reconcile run completed" && e.Reconcile == job && e.Time.After(since) {
			n++
		}
	}
	return n
}

// termsOf counts the terms of task the replica began.
func (r *replica) termsOf(task string) int {
	n := 0
	for _, e := range r.events() {
		if e.Msg == "leader election: leading" && e.Task == task {
			n++
		}
	}
	return n
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
