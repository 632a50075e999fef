package web

import "testing"

// A failed audit collection (an id-format mismatch withholds the missing
// count) shows as unknown, never as a clean audit; a working one is judged
// by its findings.
func TestAuditViewOfAFailedAudit(t *testing.T) {
	snap := &Snapshot{Metrics: map[string][]Sample{
		"outbox_audit_checked_events_total": {
			{Labels: map[string]string{"outbox": "bad"}, Value: 500},
			{Labels: map[string]string{"outbox": "good"}, Value: 500},
			{Labels: map[string]string{"outbox": "lossy"}, Value: 500},
		},
		"outbox_audit_missing_in_broker_events": {
			{Labels: map[string]string{"outbox": "lossy"}, Value: 3},
		},
	}}
	ok := map[string]bool{"audit/good": true, "audit/lossy": true, "audit/bad": false}
	got := map[string]Status{}
	for _, v := range auditViews(snap, ok) {
		got[v.Outbox] = v.Status
	}
	want := map[string]Status{"bad": Unknown, "good": OK, "lossy": Crit}
	for o, st := range want {
		if got[o] != st {
			t.Errorf("audit %s: status %q, want %q (all: %v)", o, got[o], st, got)
		}
	}
}

// A consumer group with uncommitted partitions is unknown, never OK,
// however small its lag; a lag past the deadline still shows as critical.
func TestGroupStatusUncommitted(t *testing.T) {
	for _, tc := range []struct {
		name string
		gv   groupView
		ok   bool
		want Status
	}{
		{"caught up", groupView{Deadline: 60}, true, OK},
		{"caught up but uncommitted partitions", groupView{Deadline: 60, Uncommitted: 2}, true, Unknown},
		{"late and uncommitted", groupView{Deadline: 60, LagSeconds: 600, Uncommitted: 2}, true, Crit},
		{"collector failed", groupView{Deadline: 60}, false, Unknown},
	} {
		if got := groupStatus(tc.gv, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
