package reconcile

import (
	"slices"
	"testing"
)

func TestClassify(t *testing.T) {
	// base is a judged authority row at version 3 whose event was
	// published long enough ago, and a target at the same version.
	base := Observation{InAuthority: true, Version: 3, Judged: true, Outbox: OutboxPublished, OutboxJudged: true, HasTarget: true, InTarget: true, TargetVersion: 3}
	with := func(f func(o *Observation)) Observation { o := base; f(&o); return o }
	cases := []struct {
		name string
		obs  Observation
		want []Kind
	}{
		{"in step", base, nil},
		{"no target row", with(func(o *Observation) { o.InTarget = false }), []Kind{MissingTarget}},
		{"target behind", with(func(o *Observation) { o.TargetVersion = 2 }), []Kind{StaleTarget}},
		{"target ahead", with(func(o *Observation) { o.TargetVersion = 4 }), []Kind{OrphanTarget}},
		{"no authority row", with(func(o *Observation) { o.InAuthority = false }), []Kind{OrphanTarget}},
		{"no authority row, no target row", Observation{HasTarget: true}, nil},
		{"no outbox row", with(func(o *Observation) { o.Outbox = OutboxAbsent; o.InTarget = false }), []Kind{MissingOutbox}},
		{"no outbox row, target ahead", with(func(o *Observation) { o.Outbox = OutboxAbsent; o.TargetVersion = 5 }), []Kind{MissingOutbox, OrphanTarget}},
		{"unpublished, no target row", with(func(o *Observation) { o.Outbox = OutboxUnpublished; o.InTarget = false }), nil},
		{"unpublished, target behind", with(func(o *Observation) { o.Outbox = OutboxUnpublished; o.TargetVersion = 1 }), nil},
		{"unpublished, target ahead", with(func(o *Observation) { o.Outbox = OutboxUnpublished; o.TargetVersion = 9 }), []Kind{OrphanTarget}},
		{"dead, no target row", with(func(o *Observation) { o.Outbox = OutboxDead; o.InTarget = false }), nil},
		{"published within grace, no target row", with(func(o *Observation) { o.OutboxJudged = false; o.InTarget = false }), nil},
		{"published within grace, target behind", with(func(o *Observation) { o.OutboxJudged = false; o.TargetVersion = 2 }), nil},
		{"authority within grace", with(func(o *Observation) { o.Judged = false; o.Outbox = OutboxAbsent; o.InTarget = false }), nil},
		{"authority within grace, target ahead", with(func(o *Observation) { o.Judged = false; o.TargetVersion = 7 }), nil},
		{"no outbox configured, no target row", with(func(o *Observation) { o.Outbox = OutboxNone; o.InTarget = false }), []Kind{MissingTarget}},
		{"no outbox configured, target behind", with(func(o *Observation) { o.Outbox = OutboxNone; o.TargetVersion = 1 }), []Kind{StaleTarget}},
		{"no target configured, no outbox row", with(func(o *Observation) { o.HasTarget = false; o.InTarget = false; o.Outbox = OutboxAbsent }), []Kind{MissingOutbox}},
		{"no target configured, published", with(func(o *Observation) { o.HasTarget = false; o.InTarget = false }), nil},
		{"delete-on-publish, row gone (published), no target row", with(func(o *Observation) { o.DeleteOnPublish = true; o.Outbox = OutboxAbsent; o.InTarget = false }), []Kind{MissingTarget}},
		{"delete-on-publish, row gone, target behind", with(func(o *Observation) { o.DeleteOnPublish = true; o.Outbox = OutboxAbsent; o.TargetVersion = 1 }), []Kind{StaleTarget}},
		{"delete-on-publish, row present (unpublished), no target row", with(func(o *Observation) { o.DeleteOnPublish = true; o.Outbox = OutboxUnpublished; o.InTarget = false }), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.obs); !slices.Equal(got, c.want) {
				t.Errorf("Classify(%+v) = %v, want %v", c.obs, got, c.want)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	clean := newResult("a", true)
	gaps := newResult("b", true)
	gaps.Gaps[StaleTarget] = 2
	failed := newResult("c", true)
	failed.Error = "boom"
	cases := []struct {
		name string
		err  error
		rs   []*Result
		want int
	}{
		{"clean", nil, []*Result{clean}, ExitClean},
		{"gaps", nil, []*Result{clean, gaps}, ExitGaps},
		{"failed beats gaps", nil, []*Result{gaps, failed}, ExitError},
		{"error", errBusy, nil, ExitError},
		{"no result", nil, []*Result{nil}, ExitError},
	}
	for _, c := range cases {
		if got := ExitCode(c.err, c.rs...); got != c.want {
			t.Errorf("%s: ExitCode = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestResize(t *testing.T) {
	r := &runner{chunkRows: 10_000, minRows: 1_000, maxRows: 100_000, chunkTime: 200e6}
	r.resize(50e6) // 4x too fast: grow, but at most 2x
	if r.chunkRows != 20_000 {
		t.Errorf("after a fast chunk: %d rows, want 20000", r.chunkRows)
	}
	r.resize(400e6) // 2x too slow
	if r.chunkRows != 10_000 {
		t.Errorf("after a slow chunk: %d rows, want 10000", r.chunkRows)
	}
	r.resize(10e9) // far too slow: halve, not below min
	if r.chunkRows != 5_000 {
		t.Errorf("after a very slow chunk: %d rows, want 5000", r.chunkRows)
	}
	for range 20 {
		r.resize(1)
	}
	if r.chunkRows != 100_000 {
		t.Errorf("after many fast chunks: %d rows, want the 100000 cap", r.chunkRows)
	}
}
