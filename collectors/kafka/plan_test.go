package kafka

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// planView builds a view of topic t with n partitions, all led by broker 1,
// and the given start and end offsets (nil: listed with no error for
// none of them).
func planView(t string, n int32, starts, ends []int64) view {
	pds := kadm.PartitionDetails{}
	for p := int32(0); p < n; p++ {
		pds[p] = kadm.PartitionDetail{Topic: t, Partition: p, Leader: 1}
	}
	list := func(offs []int64) kadm.ListedOffsets {
		lt := map[int32]kadm.ListedOffset{}
		for p, o := range offs {
			lt[int32(p)] = kadm.ListedOffset{Topic: t, Partition: int32(p), Offset: o}
		}
		return kadm.ListedOffsets{t: lt}
	}
	return view{meta: kadm.TopicDetails{t: {Topic: t, Partitions: pds}}, starts: list(starts), ends: list(ends)}
}

func planGroup(name, t string, commits map[int32]int64) *groupState {
	g := &groupState{name: name, typ: TypeClassic, commits: map[string][]committed{t: nil}, commitsOK: true}
	for p, at := range commits {
		setCommit(g, t, p, at, nil)
	}
	return g
}

// setCommit answers g's commit on t/p as OffsetFetch would.
func setCommit(g *groupState, t string, p int32, at int64, err error) {
	cs := g.commits[t]
	for int32(len(cs)) <= p {
		cs = append(cs, committed{})
	}
	cs[p] = committed{at: at, code: errCode(err), ok: true}
	g.commits[t] = cs
}

// errCode is err's Kafka error code, 0 for nil; OffsetFetch answers
// nothing but codes.
func errCode(err error) int16 {
	var ke *kerr.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ke):
		return ke.Code
	}
	panic(fmt.Sprintf("%v is not a Kafka error code", err))
}

// dropCommit leaves t/p out of g's OffsetFetch answer.
func dropCommit(g *groupState, t string, p int32) {
	if cs := g.commits[t]; int(p) < len(cs) {
		cs[p] = committed{}
	}
}

func runPlan(c *probeCache, g *groupState, v view, rule Uncommitted) (*lagPlan, []error) {
	var partial []error
	byGroup, _ := groupTopics([]*groupState{g}, nil)
	return c.plan([]*groupState{g}, byGroup, v, rule, &partial), partial
}

// planCase is one answer shape: edit changes the default view and group
// (3 partitions of "t", all listed and committed) into it.
type planCase struct {
	name   string
	edit   func(v *view, g *groupState)
	rule   Uncommitted
	wantOK []bool   // per partition of "t" (3 partitions)
	wants  []Want   // reads planned
	errs   []string // substrings of partial errors, in order
}

// planErrorShapeCases are the answers in the shapes Apache Kafka gives
// them, for TestPlanKafkaErrorShapes.
func planErrorShapeCases() []planCase {
	return []planCase{
		{name: "all listed, all committed",
			wantOK: []bool{true, true, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 1, 2, false}, {"t", 2, 5, false}}},
		{name: "end offset NOT_LEADER_OR_FOLLOWER on one partition",
			edit: func(v *view, _ *groupState) {
				v.ends["t"][1] = kadm.ListedOffset{Topic: "t", Partition: 1, Offset: -1, Err: kerr.NotLeaderForPartition}
			},
			wantOK: []bool{true, false, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 2, 5, false}},
			errs:   []string{"list end offset of t/1: NOT_LEADER_FOR_PARTITION"}},
		{name: "start offset unknown: a committed partition still counts from its commit",
			edit: func(v *view, _ *groupState) {
				v.starts["t"][0] = kadm.ListedOffset{Topic: "t", Partition: 0, Offset: -1, Err: kerr.UnknownServerError}
			},
			wantOK: []bool{true, true, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 1, 2, false}, {"t", 2, 5, false}},
			errs:   []string{"list start offset of t/0: UNKNOWN_SERVER_ERROR"}},
		{name: "commit below the log start is read from the log start",
			edit: func(v *view, _ *groupState) {
				v.starts["t"][2] = kadm.ListedOffset{Topic: "t", Partition: 2, Offset: 7}
			},
			wantOK: []bool{true, true, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 1, 2, false}, {"t", 2, 7, false}}},
		{name: "OffsetFetch partition error (UNSTABLE_OFFSET_COMMIT)",
			edit: func(_ *view, g *groupState) {
				setCommit(g, "t", 1, -1, kerr.UnstableOffsetCommit)
			},
			wantOK: []bool{true, false, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 2, 5, false}},
			errs:   []string{"committed offset of group g on t/1: UNSTABLE_OFFSET_COMMIT"}},
		{name: "commit -1 (no commit) ignored by default",
			edit: func(_ *view, g *groupState) {
				setCommit(g, "t", 1, -1, nil)
			},
			wantOK: []bool{true, true, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 2, 5, false}}},
		{name: "never committed, log_start: read from the log start",
			edit:   func(_ *view, g *groupState) { dropCommit(g, "t", 1) },
			rule:   FromLogStart,
			wantOK: []bool{true, true, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 1, 0, false}, {"t", 2, 5, false}}},
		{name: "never committed, log_start, start unknown: unknown",
			edit: func(v *view, g *groupState) {
				dropCommit(g, "t", 1)
				delete(v.starts["t"], 1)
			},
			rule:   FromLogStart,
			wantOK: []bool{true, false, true},
			wants:  []Want{{"t", 0, 1, false}, {"t", 2, 5, false}}},
		{name: "deleted topic (UNKNOWN_TOPIC_OR_PARTITION) goes silently",
			edit: func(v *view, _ *groupState) {
				v.meta["t"] = kadm.TopicDetail{Topic: "t", Err: kerr.UnknownTopicOrPartition}
			}},
		{name: "topic metadata error is reported",
			edit: func(v *view, _ *groupState) {
				v.meta["t"] = kadm.TopicDetail{Topic: "t", Err: kerr.LeaderNotAvailable}
			},
			errs: []string{"metadata of topic t: LEADER_NOT_AVAILABLE"}},
		{name: "caught up: nothing to read",
			edit: func(_ *view, g *groupState) {
				for p := int32(0); p < 3; p++ {
					setCommit(g, "t", p, 10, nil)
				}
			},
			wantOK: []bool{true, true, true}},
	}
}

// TestPlanKafkaErrorShapes feeds the planner answers in the shapes Apache
// Kafka gives them: per-partition error codes in ListOffsets and
// OffsetFetch, topic errors in Metadata, -1 offsets.
func TestPlanKafkaErrorShapes(t *testing.T) {
	for _, tc := range planErrorShapeCases() {
		t.Run(tc.name, func(t *testing.T) { checkPlanCase(t, tc) })
	}
}

// checkPlanCase plans tc's shape and checks the reads planned, the
// partitions known and the partial errors.
func checkPlanCase(t *testing.T, tc planCase) {
	v := planView("t", 3, []int64{0, 0, 0}, []int64{10, 10, 10})
	g := planGroup("g", "t", map[int32]int64{0: 1, 1: 2, 2: 5})
	if tc.edit != nil {
		tc.edit(&v, g)
	}
	p, partial := runPlan(newProbeCache(), g, v, tc.rule)
	if fmt.Sprint(p.wants) != fmt.Sprint(tc.wants) {
		t.Errorf("wants %v, want %v", p.wants, tc.wants)
	}
	var ok []bool
	for _, tp := range p.topics {
		for _, pp := range tp.parts {
			ok = append(ok, pp.ok)
		}
	}
	if fmt.Sprint(ok) != fmt.Sprint(tc.wantOK) {
		t.Errorf("partitions known %v, want %v", ok, tc.wantOK)
	}
	if len(partial) != len(tc.errs) {
		t.Fatalf("errors %v, want %d: %v", errors.Join(partial...), len(tc.errs), tc.errs)
	}
	for i, e := range tc.errs {
		if !strings.Contains(partial[i].Error(), e) {
			t.Errorf("error %d %q, want %q", i, partial[i], e)
		}
	}
}

// TestPlanCache: a second collection with nothing moved reads nothing; a
// moved commit, a log start moved past the commit (retention) and a read
// that stopped short (bounded work) are read again, the last continued
// from where it stopped.
func TestPlanCache(t *testing.T) {
	c := newProbeCache()
	v := planView("t", 3, []int64{0, 0, 0}, []int64{10, 10, 10})
	g := planGroup("g", "t", map[int32]int64{0: 1, 1: 2, 2: 5})
	p, _ := runPlan(c, g, v, IgnoreUncommitted)
	if len(p.wants) != 3 {
		t.Fatalf("cold plan reads %v", p.wants)
	}
	c.fill(p, []Probe{
		{From: 1, Next: 2, Stable: 10, Found: true, Offset: 1},
		{From: 2, Next: 6, Stable: 10}, // stopped short at 6: no data in [2, 6)
		{From: 5, Next: 6, Stable: 10, Found: true, Offset: 5},
	}, []bool{true, true, true})
	c.sweep()

	p, _ = runPlan(c, g, v, IgnoreUncommitted)
	if fmt.Sprint(p.wants) != fmt.Sprint([]Want{{"t", 1, 6, false}}) {
		t.Fatalf("steady plan reads %v; want only the short read, continued at 6", p.wants)
	}
	if p.misses[0].cont == nil {
		t.Fatal("the continuation does not know what it continues")
	}
	c.fill(p, []Probe{{From: 6, Next: 8, Stable: 10, Found: true, Offset: 7}}, []bool{true})
	c.sweep()
	if got := p.misses[0].pp.probe.get(); got.From != 2 || got.Offset != 7 {
		t.Fatalf("continued probe %+v; want from 2, found 7", got)
	}

	setCommit(g, "t", 0, 3, nil)
	v.starts["t"][2] = kadm.ListedOffset{Topic: "t", Partition: 2, Offset: 8}
	p, _ = runPlan(c, g, v, IgnoreUncommitted)
	if fmt.Sprint(p.wants) != fmt.Sprint([]Want{{"t", 0, 3, false}, {"t", 2, 8, false}}) {
		t.Fatalf("plan after a moved commit and retention reads %v", p.wants)
	}
	c.fill(p, []Probe{{From: 3, Next: 4, Stable: 10, Found: true, Offset: 3}, {From: 8, Next: 9, Stable: 10, Found: true, Offset: 8}}, []bool{true, true})
	c.sweep()
	if c.probes.len() != 3 {
		t.Fatalf("%d cached probes after sweep; want the 3 in use", c.probes.len())
	}
}
