package kafka

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// TestGroupSetsFollowGroups: the group series of a collector kept across
// collections (its sets found by group name, the info set kept while the
// state and protocol stay) are those a new collector sends, over seeded
// rounds where groups come and go, change state and protocol, and lose
// and regain their members' answer.
func TestGroupSetsFollowGroups(t *testing.T) {
	k := &config.Kafka{Deadline: time.Minute}
	kept := &Collector{cluster: "main", cfg: k, series: newSeriesCache()}
	rng := rand.New(rand.NewPCG(27, 1))
	states := []string{"Stable", "Empty", "PreparingRebalance", "CompletingRebalance"}
	changed := 0
	last := map[string]string{}
	for round := 0; round < 40; round++ {
		var gs []*groupState
		for i := 0; i < 12; i++ {
			if rng.IntN(5) == 0 {
				continue
			}
			g := &groupState{name: fmt.Sprintf("g%d", i), typ: []string{TypeClassic, TypeConsumer}[rng.IntN(2)],
				state: states[rng.IntN(len(states))], membersOK: rng.IntN(4) > 0, members: rng.IntN(3)}
			if g.membersOK && last[g.name] != "" && last[g.name] != g.state+g.typ {
				changed++
			}
			if g.membersOK {
				last[g.name] = g.state + g.typ
			}
			gs = append(gs, g)
		}
		fresh := &Collector{cluster: "main", cfg: k, series: newSeriesCache()}
		got, want := emitted(t, kept, gs), emitted(t, fresh, gs)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: kept collector sends\n%v\na new one\n%v", round, got, want)
		}
		if len(want) < len(gs) {
			t.Fatalf("round %d: %d series for %d groups: nothing compared", round, len(want), len(gs))
		}
	}
	if changed < 20 {
		t.Fatalf("only %d state or protocol changes: the rounds miss the case", changed)
	}
}

// emitted is what one collection of c sends for groups (no topics), as
// sorted "desc labels value" lines.
func emitted(t *testing.T, c *Collector, groups []*groupState) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	var partial []error
	c.series.begin()
	c.emit(ch, groups, &lagPlan{}, time.Unix(0, 0), &partial)
	c.series.end()
	close(ch)
	if len(partial) > 0 {
		t.Fatalf("partial: %v", partial)
	}
	var out []string
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		line := m.Desc().String()
		for _, l := range pb.Label {
			line += " " + l.GetName() + "=" + l.GetValue()
		}
		out = append(out, fmt.Sprintf("%s %v", line, pb.GetGauge().GetValue()))
	}
	sort.Strings(out)
	return out
}
