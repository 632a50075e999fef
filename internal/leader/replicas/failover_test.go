package replicas

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/app"
	"github.com/outbox-exporter/outbox_exporter/internal/leader"
)

// TestReplicasShareTheWork runs three exporter processes with
// leader_election on the real PostgreSQL server. The oracle of "once per
// schedule" is each process's own log of completed runs: only the leader
// logs any. Failover is proved for the three ways a leader goes: kill -9,
// its lease session terminated by the server, and a partition from the
// server; across all of them the replicas' logs show no two terms of the
// task at once.
func TestReplicasShareTheWork(t *testing.T) {
	a, b := fixture(t)
	bin := build(t)
	var rs []*replica
	for _, name := range []string{"r1", "r2", "r3"} {
		rs = append(rs, start(t, bin, name, a, b, ""))
	}
	killed := map[string]time.Time{}
	bounds := timing.Bounds()
	t.Logf("bounds: exit %v, partition %v (check %v, retry %v, takeover %v)", bounds.Exit, bounds.Partition, timing.Check, timing.Retry, timing.Takeover())

	// Steady state: the leader runs the job, the standbys run nothing.
	l := theLeader(t, rs)
	waitUntil(t, l.name+" completes 3 runs", func() bool { return l.runs() >= 3 })
	for _, r := range without(rs, l) {
		if n := r.runs(); n != 0 {
			t.Fatalf("standby %s ran the job %d times", r.name, n)
		}
	}
	checkExports(t, l, without(rs, l))

	// kill -9 of the leader: another leads within the bound.
	l.kill()
	killed[l.name] = time.Now()
	rs = without(rs, l)
	took := waitUntil(t, "another replica leads after kill -9", func() bool {
		for _, r := range rs {
			if ok, _ := r.leads(); ok {
				return true
			}
		}
		return false
	})
	t.Logf("kill -9: a new leader after %v (bound %v)", took, bounds.Exit)
	if took < timing.Takeover() {
		t.Errorf("a new leader %v after the kill, sooner than the takeover wait %v", took, timing.Takeover())
	}
	l2 := theLeader(t, rs)
	before := l2.runs()
	waitUntil(t, "the schedule goes on at "+l2.name, func() bool { return l2.runs() > before })

	// The server terminates the leader's lease session: the leader stops
	// before another replica starts (the logs' terms do not overlap).
	a.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", leader.AppName(app.DefaultIdentity(l2.addr)))
	waitUntil(t, l2.name+" notes the loss", func() bool {
		for _, e := range l2.events() {
			if e.Msg == "leader election: no longer leading" && e.Task == task {
				return true
			}
		}
		return false
	})
	l3 := theLeader(t, rs)
	t.Logf("after pg_terminate_backend of %s's lease session, %s leads", l2.name, l3.name)

	partition(t, rs, l3)

	if o := overlap(terms(append(rs, l), killed)); o != "" {
		t.Fatalf("two replicas led %s at once: %s", task, o)
	}
}

// partition cuts leader l3 off from the server: it stops leading while the
// server still holds its session, so no one else leads; once the server
// drops the session another replica leads, and l3 exports no findings.
func partition(t *testing.T, rs []*replica, l3 *replica) {
	// A partition between the leader and the server.
	waitUntil(t, l3.name+" runs the job", func() bool { return l3.runs() > 0 })
	cut := time.Now()
	l3.proxy.cut()
	waitUntil(t, l3.name+" stops leading when cut off", func() bool { ok, _ := l3.leads(); return !ok })
	stopped := time.Since(cut)
	t.Logf("partition: %s stopped leading after %v (stop bound %v)", l3.name, stopped, timing.StopBound())
	for _, r := range without(rs, l3) {
		if ok, _ := r.leads(); ok {
			t.Fatalf("%s leads while the server still holds %s's session", r.name, l3.name)
		}
	}
	// The server gives the silent session up after its keepalives
	// (timing.Keepalive().Total()); the proxy does it for the server.
	<-time.After(max(0, timing.Keepalive().Total()-time.Since(cut)))
	l3.proxy.sever()
	l4 := theLeader(t, without(rs, l3))
	t.Logf("partition: %s leads %v after the cut (bound %v)", l4.name, time.Since(cut), timing.Bounds().Partition)
	// The replica cut off ran the job when it led: what it still holds of
	// those runs is no longer exported.
	waitUntil(t, l4.name+" runs the job", func() bool { return l4.runs() > 0 })
	_, m, _ := l3.get(t, "/metrics")
	if !strings.Contains(m, `outbox_exporter_leader{task="`+task+`"} 0`) || strings.Contains(m, "outbox_reconcile_gaps{") {
		t.Errorf("%s, no longer leading, exports leader 1 or stale reconcile findings", l3.name)
	}
	checkExports(t, l4, without(without(rs, l3), l4))

}
