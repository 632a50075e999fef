package cdc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-exporter/outbox_exporter/collectors/cdc/cdctest"
	"github.com/outbox-exporter/outbox_exporter/internal/config"
	"github.com/outbox-exporter/outbox_exporter/internal/pg"
	"github.com/outbox-exporter/outbox_exporter/internal/testutil"
)

// The slot's lag in bytes is exactly the server's position minus the
// confirmed one, and the time it maps the confirmed position to lies
// between the exporter's sample before the write that passed it and the
// moment the next write began: the test writes, records the server's
// (time, position) around each write, and plays the connector by
// advancing the slot to positions it recorded.
func TestSlotLagAgainstRecordedWrites(t *testing.T) {
	s := startServer(t, cdctest.Options{})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), payload text)`)
	s.exec(t, `SELECT pg_create_logical_replication_slot('lagging', 'test_decoding')`)
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: "lagging", Deadline: time.Minute}})
	// The writes come faster than the history's one-second minimum gap,
	// which would merge the samples; keep every one so that the bound
	// is the test's own sampling interval.
	c.hist = NewHistory(DefaultHistorySize, 0)

	const writes = 12
	var pre, post, sampled []Sample
	for j := 0; j < writes; j++ {
		pre = append(pre, s.position(t))
		s.exec(t, `INSERT INTO outbox (payload) VALUES (repeat('x', 2000))`)
		post = append(post, s.position(t))
		if _, err := collect(t, c); err != nil {
			t.Fatal(err)
		}
		h := c.History().Samples()
		sampled = append(sampled, h[len(h)-1])
	}
	pre = append(pre, s.position(t))
	for j := 1; j < writes-1; j += 3 {
		s.exec(t, `SELECT pg_replication_slot_advance('lagging', $1::text::pg_lsn)`, post[j].LSN.String())
		conf := s.confirmed(t, "lagging")
		if conf != post[j].LSN {
			t.Fatalf("advance to %v left the slot at %v", post[j].LSN, conf)
		}
		m, err := collect(t, c)
		if err != nil {
			t.Fatal(err)
		}
		h := c.History().Samples()
		now := h[len(h)-1]
		if got, want := m.get(t, "outbox_cdc_slot_lag_bytes", "orders"), float64(now.LSN-conf); got != want {
			t.Errorf("after write %d: lag bytes %v, want %v", j, got, want)
		}
		st, _ := c.Last("orders")
		lo, hi := sampled[j-1].At, pre[j+1].At
		if st.ConfirmedAt.Before(lo) || st.ConfirmedAt.After(hi) || st.LowerBound {
			t.Errorf("after write %d: confirmed at %v (lower bound %v), want within [%v, %v]", j, st.ConfirmedAt, st.LowerBound, lo, hi)
		}
		if got, want := m.get(t, "outbox_cdc_slot_lag_seconds", "orders"), now.At.Sub(st.ConfirmedAt).Seconds(); got != want || got <= 0 {
			t.Errorf("after write %d: lag seconds %v, want %v", j, got, want)
		}
		if m.get(t, "outbox_cdc_slot_active", "orders") != 0 {
			t.Errorf("nothing streams from the slot, yet it reads active")
		}
	}
	// Caught up: the slot at the server's position reads 0 and 0.
	s.exec(t, `SELECT pg_replication_slot_advance('lagging', pg_current_wal_lsn())`)
	waitFor(t, "caught-up slot reads 0", 30*time.Second, func() (bool, string) {
		m, err := collect(t, c)
		if err != nil {
			return false, err.Error()
		}
		b, sec := m.get(t, "outbox_cdc_slot_lag_bytes", "orders"), m.get(t, "outbox_cdc_slot_lag_seconds", "orders")
		if b > 0 {
			// Background WAL (a checkpoint, running-xacts) moved on; advance again.
			s.exec(t, `SELECT pg_replication_slot_advance('lagging', pg_current_wal_lsn())`)
		}
		return b == 0 && sec == 0, "bytes " + ftoa(b) + " seconds " + ftoa(sec)
	})
}

// Just after a start the history is one sample: a slot far behind must
// not read 0 seconds. The last checkpoint seeds the history, so the slot
// reads at least now - checkpoint time, marked as a lower bound, and never
// more than the truth.
func TestLagAfterRestartIsALowerBoundNotZero(t *testing.T) {
	s := startServer(t, cdctest.Options{})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, payload text)`)
	s.exec(t, `SELECT pg_create_logical_replication_slot('behind', 'test_decoding')`)
	before := s.position(t)
	s.exec(t, `INSERT INTO outbox (payload) VALUES ('first')`)
	s.exec(t, `CHECKPOINT`)
	// The checkpoint's time has one-second resolution: make sure now is
	// past it.
	waitFor(t, "a second passes on the server", 10*time.Second, func() (bool, string) {
		return s.position(t).At.Sub(before.At) > 1500*time.Millisecond, ""
	})
	s.exec(t, `INSERT INTO outbox (payload) VALUES ('second')`)
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: "behind", Deadline: time.Minute}})
	m, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	h := c.History().Samples()
	now := h[len(h)-1]
	lag := m.get(t, "outbox_cdc_slot_lag_seconds", "orders")
	if lag <= 0 || m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders") != 1 {
		t.Fatalf("first collection: lag %v s, lower bound %v; want > 0 and marked", lag, m.get(t, "outbox_cdc_slot_lag_lower_bound", "orders"))
	}
	// The truth: the server left the slot's position after before.At.
	if truth := now.At.Sub(before.At).Seconds(); lag > truth {
		t.Errorf("lower bound %v s exceeds the truth %v s", lag, truth)
	}
	if len(h) != 2 {
		t.Errorf("history after the first collection: %v, want the checkpoint and now", h)
	}
}

// A missing slot fails the collection with its name, after the other
// slots' metrics are sent; a physical slot is refused as well.
func TestMissingAndPhysicalSlots(t *testing.T) {
	s := startServer(t, cdctest.Options{})
	s.exec(t, `SELECT pg_create_logical_replication_slot('present', 'pgoutput')`)
	s.exec(t, `SELECT pg_create_physical_replication_slot('standby', true)`)
	c := newCollector(s, map[string]*config.CDC{
		"a": {Database: "main", Slot: "present", Deadline: time.Minute},
		"b": {Database: "main", Slot: "dropped_one", Deadline: time.Minute},
		"c": {Database: "main", Slot: "standby", Deadline: time.Minute},
	})
	m, err := collect(t, c)
	if err == nil || !strings.Contains(err.Error(), `replication slot "dropped_one" does not exist`) || !strings.Contains(err.Error(), `replication slot "standby" is physical`) {
		t.Fatalf("error %v; want both bad slots named", err)
	}
	if m.get(t, "outbox_cdc_slot_wal_status", "a", "status=reserved") != 1 {
		t.Errorf("the present slot's metrics are missing or wrong: %v", m)
	}
	if m.get(t, "outbox_cdc_deadline_seconds", "b") != 60 {
		t.Errorf("deadline of the missing slot: %v", m)
	}
	if _, ok := m["outbox_cdc_slot_lag_bytes{cdc=b}"]; ok {
		t.Errorf("a missing slot has a lag: %v", m)
	}
	// What an outbox published by a slot reads: the state of a slot read,
	// the error of one that could not be.
	ctx := context.Background()
	if st, err := c.State(ctx, "a"); err != nil || st.ConfirmedAt.IsZero() {
		t.Errorf("State of the present slot: %+v, %v", st, err)
	}
	if _, err := c.State(ctx, "b"); err == nil || !strings.Contains(err.Error(), `replication slot "dropped_one" does not exist`) {
		t.Errorf("State of the missing slot: %v, want its error", err)
	}
	// The slots that are not there say so, rather than only vanish.
	for cdc, want := range map[string]float64{"a": 0, "b": 1, "c": 1} {
		if got := m.get(t, "outbox_cdc_slot_missing", cdc); got != want {
			t.Errorf("outbox_cdc_slot_missing{cdc=%s} = %v, want %v", cdc, got, want)
		}
	}
	// A slot dropped between two collections reads missing at once.
	s.exec(t, `SELECT pg_drop_replication_slot('present')`)
	m, _ = collect(t, c)
	if got := m.get(t, "outbox_cdc_slot_missing", "a"); got != 1 {
		t.Errorf("after the drop, outbox_cdc_slot_missing{cdc=a} = %v, want 1", got)
	}
	if _, err := c.State(ctx, "a"); err == nil {
		t.Errorf("State of the dropped slot has no error")
	}
}

// State waits for the first collection (the outbox it serves is collected
// in the same scrape), up to ctx's end; a collection that cannot read the
// slots leaves no state to judge by.
func TestStateBeforeAndAfterAFailedCollection(t *testing.T) {
	ctx := context.Background()
	pool, err := pg.Open(ctx, &config.Database{DSN: "postgres://x@127.0.0.1:1/app?connect_timeout=2", MaxConnections: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := NewCollector("app", map[string]*config.CDC{"o": {Database: "app", Slot: "s", Deadline: time.Minute}}, pool, testutil.Quiet())
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.State(short, "o"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("State before any collection: %v, want to wait for one until the deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.State(ctx, "o")
		done <- err
	}()
	ch := make(chan prometheus.Metric, 64)
	if err := c.Update(ctx, ch); err == nil {
		t.Fatal("a collection on an unreachable server worked")
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), `cdc on database "app"`) {
		t.Errorf("State waiting for a failed collection: %v, want its error", err)
	}
}

// A connector streaming from the slot (pg_recvlogical, PostgreSQL's own
// logical replication client) makes it active with ~0 lag; when it stops
// the slot reads inactive and the lag grows with every write.
func TestActiveConnectorThenStopped(t *testing.T) {
	s := startServer(t, cdctest.Options{})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, payload text)`)
	s.exec(t, `SELECT pg_create_logical_replication_slot('streamed', 'test_decoding')`)
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: "streamed", Deadline: time.Minute}})
	bin, err := exec.LookPath("pg_recvlogical")
	if err != nil {
		bin = "/usr/lib/postgresql/15/bin/pg_recvlogical"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recv := exec.CommandContext(ctx, bin, "-d", s.cluster.URL("postgres"), "--slot", "streamed", "--start",
		"-f", filepath.Join(t.TempDir(), "changes.txt"), "-F", "1", "-s", "1")
	recv.Stderr = os.Stderr
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = recv.Process.Kill()
			_ = recv.Wait()
		}
	}()
	s.exec(t, `INSERT INTO outbox (payload) SELECT 'e' || g FROM generate_series(1, 100) g`)
	waitFor(t, "streaming slot is active and caught up", 60*time.Second, func() (bool, string) {
		m, err := collect(t, c)
		if err != nil {
			return false, err.Error()
		}
		a, b := m.get(t, "outbox_cdc_slot_active", "orders"), m.get(t, "outbox_cdc_slot_lag_bytes", "orders")
		sec := m.get(t, "outbox_cdc_slot_lag_seconds", "orders")
		return a == 1 && b == 0 && sec == 0, "active " + ftoa(a) + " bytes " + ftoa(b) + " seconds " + ftoa(sec)
	})
	_ = recv.Process.Kill()
	_ = recv.Wait()
	stopped = true
	waitFor(t, "stopped connector's slot is inactive", 30*time.Second, func() (bool, string) {
		m, err := collect(t, c)
		return err == nil && m.get(t, "outbox_cdc_slot_active", "orders") == 0, ""
	})
	var lastBytes, lastSec float64
	for i := 0; i < 5; i++ {
		s.exec(t, `INSERT INTO outbox (payload) VALUES (repeat('y', 1000))`)
		m, err := collect(t, c)
		if err != nil {
			t.Fatal(err)
		}
		b, sec := m.get(t, "outbox_cdc_slot_lag_bytes", "orders"), m.get(t, "outbox_cdc_slot_lag_seconds", "orders")
		if b <= lastBytes || (i > 0 && sec <= lastSec) {
			t.Fatalf("write %d: lag %v bytes %v s after %v bytes %v s: it must grow", i, b, sec, lastBytes, lastSec)
		}
		lastBytes, lastSec = b, sec
	}
}

// A slot left behind past max_slot_wal_keep_size loses its WAL at the
// next checkpoint: wal_status goes to lost, and safe_wal_size (the WAL
// that could still be written) disappears with it.
func TestWALStatusLost(t *testing.T) {
	s := startServer(t, cdctest.Options{WALSegmentMB: 1, Settings: map[string]string{
		"max_slot_wal_keep_size": "4MB", "min_wal_size": "2MB", "max_wal_size": "8MB", "wal_keep_size": "0",
	}})
	s.exec(t, `CREATE TABLE outbox (id bigserial PRIMARY KEY, payload text)`)
	s.exec(t, `SELECT pg_create_logical_replication_slot('doomed', 'pgoutput')`)
	c := newCollector(s, map[string]*config.CDC{"orders": {Database: "main", Slot: "doomed", Deadline: time.Minute}})
	m, err := collect(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if m.get(t, "outbox_cdc_slot_wal_status", "orders", "status=reserved") != 1 || m.get(t, "outbox_cdc_slot_safe_wal_size_bytes", "orders") <= 0 {
		t.Fatalf("fresh slot: %v", m)
	}
	seen := map[string]bool{}
	waitFor(t, "slot lost", 2*time.Minute, func() (bool, string) {
		s.exec(t, `INSERT INTO outbox (payload) SELECT repeat(md5(g::text), 30) FROM generate_series(1, 2000) g`)
		s.exec(t, `CHECKPOINT`)
		m, err := collect(t, c)
		if err != nil {
			return false, err.Error()
		}
		for _, st := range WALStatuses {
			if m.get(t, "outbox_cdc_slot_wal_status", "orders", "status="+st) == 1 {
				seen[st] = true
			}
		}
		_, safe := m["outbox_cdc_slot_safe_wal_size_bytes{cdc=orders}"]
		lost := m.get(t, "outbox_cdc_slot_wal_status", "orders", "status=lost") == 1
		return lost && !safe, ftoa(m.get(t, "outbox_cdc_slot_lag_bytes", "orders"))
	})
	n := 0
	for _, st := range WALStatuses {
		if m2, _ := collect(t, c); m2.get(t, "outbox_cdc_slot_wal_status", "orders", "status="+st) == 1 {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d wal_status series are 1, want exactly one", n)
	}
	t.Logf("wal_status seen on the way: %v", seen)
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
