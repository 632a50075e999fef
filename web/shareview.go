package web

import "sort"

// shareView is one share group (KIP-932) on the page: its lag, deadline,
// members and the state the broker reports.
type shareView struct {
	Cluster, Group string
	Status         Status
	State          string
	LagSeconds     float64
	LagMessages    float64
	Deadline       float64
	Members        float64
}

// shareGroupSet is the (cluster, group) of every share group with series.
func shareGroupSet(snap *Snapshot) map[[2]string]bool {
	set := map[[2]string]bool{}
	for _, name := range []string{"outbox_share_group_info", "outbox_share_group_lag_messages", "outbox_share_group_members"} {
		for _, smp := range snap.Metrics[name] {
			set[[2]string{smp.Labels["cluster"], smp.Labels["group"]}] = true
		}
	}
	return set
}

// shareViews judges each share group's time lag (the age of the record
// at its start offset, an upper bound) against its deadline. A share
// group without a lag series yet is unknown, not ok.
func shareViews(snap *Snapshot, collectorOK map[string]bool) []shareView {
	lagSec := snap.MaxBy("outbox_share_group_lag_seconds", "cluster", "group")
	lagMsg := snap.SumBy("outbox_share_group_lag_messages", "cluster", "group")
	members := snap.MaxBy("outbox_share_group_members", "cluster", "group")
	deadline := snap.MaxBy("outbox_consumer_deadline_seconds", "cluster", "group")
	state := map[[2]string]string{}
	for _, smp := range snap.Metrics["outbox_share_group_info"] {
		state[[2]string{smp.Labels["cluster"], smp.Labels["group"]}] = smp.Labels["state"]
	}
	var out []shareView
	for k := range shareGroupSet(snap) {
		v := shareView{Cluster: k[0], Group: k[1], State: state[k], Deadline: deadline[k]}
		v.LagSeconds, v.LagMessages, v.Members = lagSec[k], lagMsg[k], members[k]
		_, hasLag := lagSec[k]
		v.Status = statusFor(v.LagSeconds, v.Deadline)
		if !hasLag || !collectorOK["kafka/"+k[0]] {
			v.Status = worst(v.Status, Unknown)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Cluster+"\x00"+out[i].Group < out[j].Cluster+"\x00"+out[j].Group
	})
	return out
}
