package kafka

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestPlanHintsAsFreshLookups: a plan that reuses the last plan's
// partitions and tries their cache entries first decides exactly what a
// plan with no memory of the last one decides (its oracle: the last plan
// forgotten before each collection), over seeded rounds where commits
// move, records are appended, retention passes commits, some reads fail
// and some stop short (continuations). A found difference keeps its seed
// here as a regression case.
func TestPlanHintsAsFreshLookups(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 20, 77} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { planHintsAsFresh(t, seed) })
	}
}

func planHintsAsFresh(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	const parts, groups = 6, 5
	hinted, fresh := newProbeCache(), newProbeCache()
	commits := make([][]int64, groups)
	for g := range commits {
		commits[g] = make([]int64, parts)
		for p := range commits[g] {
			commits[g][p] = rng.Int64N(10)
		}
	}
	starts, ends := make([]int64, parts), make([]int64, parts)
	for p := range ends {
		ends[p] = 10 + rng.Int64N(5)
	}
	now := time.Unix(1e6, 0)
	for round := 0; round < 60; round++ {
		for g := range commits {
			for p := range commits[g] {
				switch rng.IntN(6) {
				case 0:
					commits[g][p] = min(commits[g][p]+1+rng.Int64N(3), ends[p])
				case 1:
					ends[p] += rng.Int64N(3)
				case 2:
					starts[p] = min(starts[p]+rng.Int64N(2), ends[p])
				}
			}
		}
		v := planView("t", parts, starts, ends)
		var states []*groupState
		for g := range commits {
			cs := map[int32]int64{}
			for p, at := range commits[g] {
				if rng.IntN(10) > 0 { // sometimes never committed
					cs[int32(p)] = at
				}
			}
			states = append(states, planGroup(fmt.Sprintf("g%d", g), "t", cs))
		}
		fresh.last = nil
		hp, hPartial := planRound(hinted, states, v, seed, round)
		fp, fPartial := planRound(fresh, states, v, seed, round)
		if fmt.Sprint(hp.wants) != fmt.Sprint(fp.wants) || fmt.Sprint(hPartial) != fmt.Sprint(fPartial) {
			t.Fatalf("round %d: hinted plan reads %v (%v), fresh %v (%v)", round, hp.wants, hPartial, fp.wants, fPartial)
		}
		if h, f := decidedAll(hp, now), decidedAll(fp, now); h != f {
			t.Fatalf("round %d: hinted plan decides\n%s\nfresh\n%s", round, h, f)
		}
		if hinted.probes.len() != fresh.probes.len() {
			t.Fatalf("round %d: %d cached, fresh %d", round, hinted.probes.len(), fresh.probes.len())
		}
		hinted.probes.each(func(cp *cachedProbe) {
			if cp.gen != hinted.gen {
				t.Fatalf("round %d: entry %v not used by this collection is still cached", round, cp.key)
			}
			if cp.dropped || hinted.probes.get(cp.key) != cp {
				t.Fatalf("round %d: entry %v is dropped (%v) or not the one found under its key", round, cp.key, cp.dropped)
			}
		})
	}
}

// planRound plans, answers the reads (the same answers for both caches:
// drawn from a generator seeded by seed and round) and sweeps.
func planRound(c *probeCache, states []*groupState, v view, seed uint64, round int) (*lagPlan, []error) {
	var partial []error
	byGroup, _ := groupTopics(states, nil)
	p := c.plan(states, byGroup, v, IgnoreUncommitted, &partial)
	answers := rand.New(rand.NewPCG(seed, uint64(round)))
	probes, ok := make([]Probe, len(p.wants)), make([]bool, len(p.wants))
	for i, w := range p.wants {
		ok[i] = answers.IntN(8) > 0
		end := v.ends["t"][w.Partition].Offset
		switch answers.IntN(3) {
		case 0: // stopped short, no data yet: continued later
			probes[i] = Probe{From: w.From, Next: min(w.From+1, end), Stable: end}
		default:
			probes[i] = Probe{From: w.From, Next: w.From + 1, Stable: end, Found: true, Offset: w.From, Timestamp: time.Unix(1e5+w.From, 0)}
		}
	}
	c.fill(p, probes, ok)
	c.sweep()
	return p, partial
}

func decidedAll(p *lagPlan, now time.Time) string {
	var out string
	for i := range p.topics {
		out += fmt.Sprintf("%s %v\n", p.topics[i].group.name, decideTopic(&p.topics[i], now, nil))
	}
	return out
}
