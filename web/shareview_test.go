package web

import "testing"

// Share groups get a section of their own, judged against their deadline,
// and are left out of the consumer groups; one without a lag series yet
// is unknown.
func TestShareViews(t *testing.T) {
	l := func(g string, extra ...string) map[string]string {
		m := map[string]string{"cluster": "main", "group": g}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	snap := &Snapshot{Metrics: map[string][]Sample{
		"outbox_share_group_info": {
			{Labels: l("queue", "state", "Stable"), Value: 1},
			{Labels: l("late", "state", "Stable"), Value: 1},
			{Labels: l("new", "state", "Empty"), Value: 1},
		},
		"outbox_share_group_lag_seconds": {
			{Labels: l("queue", "topic", "a"), Value: 5},
			{Labels: l("late", "topic", "a"), Value: 20},
			{Labels: l("late", "topic", "b"), Value: 700},
		},
		"outbox_share_group_lag_messages": {
			{Labels: l("queue", "topic", "a"), Value: 3},
			{Labels: l("late", "topic", "a"), Value: 4},
			{Labels: l("late", "topic", "b"), Value: 6},
		},
		"outbox_consumer_deadline_seconds": {
			{Labels: l("queue"), Value: 600}, {Labels: l("late"), Value: 600}, {Labels: l("new"), Value: 600},
		},
	}}
	got := map[string]shareView{}
	for _, v := range shareViews(snap, map[string]bool{"kafka/main": true}) {
		got[v.Group] = v
	}
	want := map[string]Status{"queue": OK, "late": Crit, "new": Unknown}
	for g, st := range want {
		if got[g].Status != st {
			t.Errorf("share group %s: status %q, want %q (%+v)", g, got[g].Status, st, got[g])
		}
	}
	if got["late"].LagMessages != 10 || got["late"].LagSeconds != 700 || got["queue"].State != "Stable" {
		t.Errorf("late: %+v, queue: %+v", got["late"], got["queue"])
	}
	if set := shareGroupSet(snap); !set[[2]string{"main", "new"}] || len(set) != 3 {
		t.Errorf("share group set %v", set)
	}
}
