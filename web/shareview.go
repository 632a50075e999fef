package web

import (
	"sort"

	"github.com/outbox-exporter/outbox_exporter/internal/vocab"
)

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
	for _, name := range []string{vocab.ShareGroupInfo, vocab.ShareGroupLagMessages, vocab.ShareGroupMembers} {
		for _, smp := range snap.Metrics[name] {
			set[[2]string{smp.Labels[vocab.LabelCluster], smp.Labels[vocab.LabelGroup]}] = true
		}
	}
	return set
}

// shareViews judges each share group's time lag (the age of the record
// at its start offset, an upper bound) against its deadline. A share
// group without a lag series yet is unknown, not ok.
func shareViews(snap *Snapshot, collectorOK map[string]bool) []shareView {
	lagSec := snap.MaxBy(vocab.ShareGroupLagSeconds, vocab.LabelCluster, vocab.LabelGroup)
	lagMsg := snap.SumBy(vocab.ShareGroupLagMessages, vocab.LabelCluster, vocab.LabelGroup)
	members := snap.MaxBy(vocab.ShareGroupMembers, vocab.LabelCluster, vocab.LabelGroup)
	deadline := snap.MaxBy(vocab.ConsumerDeadline, vocab.LabelCluster, vocab.LabelGroup)
	state := map[[2]string]string{}
	for _, smp := range snap.Metrics[vocab.ShareGroupInfo] {
		state[[2]string{smp.Labels[vocab.LabelCluster], smp.Labels[vocab.LabelGroup]}] = smp.Labels["state"]
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
