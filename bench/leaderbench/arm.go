package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

func config(a, b, schedule string) string {
	return fmt.Sprintf(`
databases:
  main: {dsn: %q, max_connections: 2}
  search: {dsn: %q, max_connections: 2}
outboxes:
  messages:
    database: main
    table: public.outbox
    id: event_id
    created_at: created_at
    status: status
    pending: [PENDING]
    published: [PUBLISHED]
    published_at: published_at
    deadline: 5m
reconcile:
  search_index:
    schedule: %q
    window: 24h
    authority: {database: main, table: public.messages, key: id, version: version, created_at: created_at}
    outbox: {name: messages, key: message_id, version: message_version}
    target: {database: search, table: public.search_index, key: message_id, version: version}
leader_election:
  database: main
`, a, b, schedule)
}

// arm runs n replicas for dur, each scraped every 15 s, then, with runs
// above zero, until the replicas have logged that many reconcile runs
// completed (without more scrapes), and returns the work the two
// databases did meanwhile and the runs the replicas logged. Every arm
// then holds the same runs: where the last one falls against the arm's
// end (the schedule's phase) no longer changes what is counted.
func arm(ctx context.Context, bin string, cfgs []string, a, b string, dur time.Duration, runs int64, scrapeFirst bool, proxy *pgProxy, k *kafkaPipeline) (work, error) {
	before, err := counters(ctx, a, b)
	if err != nil {
		return work{}, err
	}
	var kBefore brokerWork
	if k != nil {
		if kBefore, err = k.counters(ctx); err != nil {
			return work{}, err
		}
	}
	postmaster, err := postmasterPID(ctx, a)
	if err != nil {
		return work{}, err
	}
	serverBefore, err := serverTicks(postmaster)
	if err != nil {
		return work{}, fmt.Errorf("the server's CPU time: %w", err)
	}
	proxy.reset()
	cmds, logs, addrs, err := startReplicas(bin, cfgs)
	if err != nil {
		stop(cmds)
		return work{}, err
	}
	// Scrapes on a 15 s ticker, as Prometheus does: a loop that slept 15 s
	// after each scrape would leave more than 15 s between two, and the
	// exporter collects by itself whenever 15 s pass without one.
	start := time.Now()
	end := start.Add(dur)
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	var scrapes int64
	for ; time.Now().Before(end); <-tick.C {
		for i, addr := range addrs {
			if i == 0 || !scrapeFirst {
				scrape(addr)
				scrapes++
			}
		}
	}
	waitErr := awaitRuns(logs, runs, time.Now().Add(dur/4+time.Minute))
	length := time.Since(start)
	stop(cmds)
	if waitErr != nil {
		return work{}, waitErr
	}
	time.Sleep(2 * time.Second) // the servers flush their statistics
	after, err := counters(ctx, a, b)
	if err != nil {
		return work{}, err
	}
	w := work{tuples: after.tuples - before.tuples, xacts: after.xacts - before.xacts, blocks: after.blocks - before.blocks, scrapes: scrapes, length: length}
	w.wire = proxy.take()
	serverAfter, err := serverTicks(postmaster)
	if err != nil {
		return work{}, fmt.Errorf("the server's CPU time: %w", err)
	}
	w.serverTicks = serverAfter - serverBefore
	w.runs, w.audits = logged(logs)
	for _, l := range logs {
		r, a := logged([]string{l})
		w.runsBy, w.auditsBy = append(w.runsBy, r), append(w.auditsBy, a)
	}
	if k != nil {
		kAfter, err := k.counters(ctx)
		if err != nil {
			return work{}, err
		}
		w.broker = kAfter.minus(kBefore)
	}
	return w, nil
}

// startReplicas starts a replica per configuration, each on an address
// of its own and logging to a file beside its configuration.
func startReplicas(bin string, cfgs []string) (cmds []*exec.Cmd, logs, addrs []string, err error) {
	for i, cfg := range cfgs {
		addr, err := freeAddr()
		if err != nil {
			return cmds, nil, nil, err
		}
		log := filepath.Join(filepath.Dir(cfg), fmt.Sprintf("arm%d-r%d.log", len(cfgs), i))
		f, err := os.Create(log)
		if err != nil {
			return cmds, nil, nil, err
		}
		c := exec.Command(bin, "--config.file="+cfg, "--web.listen-address="+addr, "--log.format=json")
		c.Stdout, c.Stderr = f, f
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return cmds, nil, nil, err
		}
		cmds, logs, addrs = append(cmds, c), append(logs, log), append(addrs, addr)
	}
	return cmds, logs, addrs, nil
}

// stop ends the replicas and waits for them.
func stop(cmds []*exec.Cmd) {
	for _, c := range cmds {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
		_ = c.Wait()
	}
}

// logged counts the reconcile runs completed and the audits started that
// the replicas' logs hold.
func logged(logs []string) (runs, audits int64) {
	for _, l := range logs {
		raw, _ := os.ReadFile(l)
		runs += int64(strings.Count(string(raw), `"msg":"reconcile run completed"`))
		audits += int64(strings.Count(string(raw), `audit started: this replica leads it`))
	}
	return runs, audits
}

// awaitRuns waits until the logs hold runs reconcile runs completed
// (none to wait for when runs is zero or less), at most until deadline.
// It reads the log files only, which the databases do not see.
func awaitRuns(logs []string, runs int64, deadline time.Time) error {
	for runs > 0 {
		got, _ := logged(logs)
		switch {
		case got >= runs:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("the replicas completed %d reconcile runs by the deadline, want %d (see -runs)", got, runs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func scrape(addr string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// counters sums pg_stat_database's counters of the given databases, read
// from each (a fresh session, so its own work is small and the same in
// every arm).
func counters(ctx context.Context, urls ...string) (work, error) {
	var w work
	for _, u := range urls {
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			return w, err
		}
		var t, x, bl int64
		err = c.QueryRow(ctx, `SELECT tup_returned + tup_fetched, xact_commit + xact_rollback, blks_hit + blks_read
			FROM pg_stat_database WHERE datname = current_database()`).Scan(&t, &x, &bl)
		c.Close(ctx)
		if err != nil {
			return w, err
		}
		w.tuples += t
		w.xacts += x
		w.blocks += bl
	}
	return w, nil
}

// postmasterPID is the PID of the server's postmaster: the parent of a
// session's backend.
func postmasterPID(ctx context.Context, u string) (int, error) {
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var pid int
	if err := c.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return 0, err
	}
	_, _, ppid, err := procTimes(pid)
	if err != nil {
		return 0, fmt.Errorf("the server is not on this machine (its backends' CPU is read from /proc): %w", err)
	}
	return ppid, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// checkIndexes runs the exporter's check on cfg and creates on the outbox
// database the indexes it asks for (a deployment that follows check's
// advice: without them the per-scrape queries read whole tables), then
// checks again, which must pass. It returns how many it created.
func checkIndexes(ctx context.Context, bin, cfg, outboxDB string) (int, error) {
	out, _ := exec.CommandContext(ctx, bin, "check", "--config.file="+cfg).CombinedOutput()
	stmts := regexp.MustCompile(`(?m)^\s+(CREATE INDEX CONCURRENTLY .*;)$`).FindAllStringSubmatch(string(out), -1)
	c, err := pgx.Connect(ctx, outboxDB)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer c.Close(ctx)
	for _, m := range stmts {
		if _, err := c.Exec(ctx, m[1]); err != nil {
			return 0, fmt.Errorf("create the index check asks for: %w", err)
		}
	}
	if _, err := c.Exec(ctx, "ANALYZE"); err != nil {
		return 0, fmt.Errorf("analyze: %w", err)
	}
	if out, err := exec.CommandContext(ctx, bin, "check", "--config.file="+cfg).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("check still fails after creating its indexes: %w\n%s", err, out)
	}
	return len(stmts), nil
}
