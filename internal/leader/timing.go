// Package leader makes one replica of the exporter lead each task that
// must be done once (a reconcile job, an audit) while the others stand
// by.
//
// A task's lease is a session-level PostgreSQL advisory lock, taken with
// pg_try_advisory_lock (or waited for with pg_advisory_lock by a
// replica that holds none: Timing.Wait) on a key derived from the task's
// name, held by the one lease session each replica keeps on the
// configured database's server. An advisory lock needs no privilege and
// no write, so the exporter's read-only role can hold it; the server
// releases it the moment the session ends, whether the replica closed
// it, died or was terminated. No protocol of our own decides anything:
// the server's lock table does.
//
// Timing (Timing): the holder checks its session every Check, each check
// bounded by Check; a failed check ends every term at once. A replica that
// wins a lock waits Check+Check more, still checking its session, before
// its term begins: the replica that held the lock before has by then
// noticed that it lost it. The server drops a session whose client went
// silent only after its keepalives (Keepalive) fail, which is set longer
// than the holder's own detection, so that across a partition too the old
// leader stops before the server frees the lock.
package leader

import (
	"hash/fnv"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/pg"
)

// namespace keeps the exporter's lock keys apart from the advisory locks
// of applications on the same database; changing it would let an old and
// a new version lead at once during a rolling upgrade, so it stays.
const namespace = "outbox_exporter/leader/v1"

// Key is the advisory lock key of task: the 64-bit FNV-1a hash of the
// namespace and the task name, stable across versions and platforms.
func Key(task string) int64 {
	h := fnv.New64a()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(task))
	return int64(h.Sum64())
}

// Task names a task: "reconcile/NAME" or "audit/NAME".
func Task(kind, name string) string { return kind + "/" + name }

// StandbyWait is the Wait of the exporter's replicas: a minute, so that
// a standby costs the server one small transaction a minute (its try and
// its wait share one), reads who leads once a minute, and keeps a
// snapshot no longer than that.
//
// It stays a minute, not longer: the waiting statement holds a snapshot
// for the whole wait (pg_stat_activity shows its backend_xmin), which
// keeps VACUUM on the leases' database from removing rows deleted
// meanwhile, and no wait for an advisory lock holds none. Every statement
// that can call pg_advisory_lock takes a snapshot first (a SELECT, CALL,
// EXPLAIN, even the protocol's fast-path function call); the one
// statement that waits for a lock without a snapshot, LOCK TABLE, waits
// for a table's lock, which a leader could hold only by keeping a
// transaction open for its whole term. A longer wait would save the
// server a transaction a minute and cost the monitored database a longer
// vacuum horizon.
const StandbyWait = time.Minute

// Timing is the election's clock.
type Timing struct {
	// Check is how often a session is checked, and how long one check may
	// take.
	Check time.Duration
	// Retry is how often a replica tries to take a task it does not
	// lead when it does not wait for one (Wait zero), and how soon it
	// opens its session again after losing it.
	Retry time.Duration
	// Wait, when set, is how long a replica that holds no lock waits, in
	// one statement, for the lock of a task another replica leads,
	// before it tries every task again and reads who leads them: the
	// server grants the lock the moment its holder's session ends, and a
	// standby costs the server one transaction per Wait instead of one
	// per Retry. The statement holds a snapshot while it waits, so
	// VACUUM on that server keeps rows deleted for at most Wait longer.
	Wait time.Duration
}

// StopBound is how long after its session last answered a leader may
// still be leading: the next check starts within Check and fails within
// Check more.
func (t Timing) StopBound() time.Duration { return 2 * t.Check }

// Takeover is how long a replica that won a lock waits before its term
// begins: the previous holder's StopBound, counted from when the lock
// was freed (which is no earlier than when its session last answered).
func (t Timing) Takeover() time.Duration { return t.StopBound() }

// Keepalive is the lease session's server-side keepalive: the server
// keeps a silent session (and its locks) at least StopBound plus four
// seconds, so that the partitioned leader has stopped before the lock is
// freed.
func (t Timing) Keepalive() pg.LeaseKeepalive {
	idle := t.StopBound() + time.Second
	return pg.LeaseKeepalive{Idle: idle.Round(time.Second), Interval: time.Second, Count: 3}
}

// Failover bounds how long a task goes without a leader after its leader
// fails, when another replica is up and can reach the server.
type Failover struct {
	// Exit: the leader's process dies or its session is terminated; the
	// server frees the lock at once.
	Exit time.Duration
	// Partition: the leader can no longer reach the server; the server
	// frees the lock when its keepalives give up.
	Partition time.Duration
}

// Bounds returns the failover bounds. Without Wait: the lock is freed,
// a standby's next try comes within Retry and takes at most Check, then
// it waits Takeover. With Wait: a standby waiting for the lock gets it
// at once; one between two waits, or one leading another task, takes it
// within the statement it is sending (at most Check) and the next (at
// most Check); then it waits Takeover.
func (t Timing) Bounds() Failover {
	after := t.Retry + t.Check + t.Takeover()
	if t.Wait > 0 {
		after = 2*t.Check + t.Takeover()
	}
	ka := t.Keepalive()
	return Failover{Exit: after, Partition: ka.Total() + after}
}

// wait is how long the loop sleeps before its next round: a replica that
// holds a lock (leading or taking over) checks its session every Check
// (and tries the tasks it lacks with the same query); one that holds
// none tries again every Retry.
func (t Timing) wait(holding bool) time.Duration {
	if holding {
		return t.Check
	}
	return t.Retry
}
