package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// A share group's first offsets answer through kgo tells its coordinator,
// and its offsets then go straight there; when the broker says the
// coordinator moved, the group is asked again through kgo, exported
// exactly in the same collection, and its true coordinator kept again;
// so is a group whose kept coordinator is no broker. kfake (3 brokers)
// is the real part here; the move itself is made by writing a wrong node
// into the kept coordinators, since neither broker moves a group's
// coordinator on demand: the broker asked answers NOT_COORDINATOR, as
// after a move.
func TestShareCoordinatorMoved(t *testing.T) {
	kc := kafkatest.New(t, 3)
	e := kenv{Env: kc, kc: kc}
	k := kafkaCfg(e.Brokers())
	k.ShareGroups = []string{e.pat("/q.*/")}
	s := seedShareGroups(t, e, k, 12)
	c := newKafka(t, k)
	c.shareLim = shareLimits{chunk: 1, fixed: true, conns: 2, timeout: 10 * time.Second}
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	if _, err := scrape(t, c, 30*time.Second); err != nil {
		t.Fatalf("first Update: %v", err)
	}
	sc := &c.shareCoord
	sc.mu.Lock()
	if len(sc.node) != len(s.groups) {
		sc.mu.Unlock()
		t.Fatalf("%d coordinators kept for %d groups", len(sc.node), len(s.groups))
	}
	moved, coord := 0, map[string]int32{}
	for _, g := range s.groups {
		coord[g] = sc.node[g]
		// The next broker of the three (nodes 0-2): not the
		// coordinator.
		sc.node[g] = (sc.node[g] + 1) % 3
		moved++
	}
	sc.mu.Unlock()
	got, err := scrape(t, c, 30*time.Second)
	if err != nil {
		t.Fatalf("Update after the move: %v", err)
	}
	for _, g := range s.groups {
		wantSeries(t, got, s.want(g, now), 0.001)
	}
	sc.mu.Lock()
	if fmt.Sprint(sc.node) != fmt.Sprint(coord) {
		sc.mu.Unlock()
		t.Fatalf("after the broker's NOT_COORDINATOR for all %d groups the coordinators kept are %v; want %v", moved, sc.node, coord)
	}
	// A coordinator that is no broker at all (a broker gone): asked
	// through kgo too.
	sc.node[s.groups[0]] = 7
	sc.mu.Unlock()
	got, err = scrape(t, c, 30*time.Second)
	if err != nil {
		t.Fatalf("Update with a coordinator gone: %v", err)
	}
	for _, g := range s.groups {
		wantSeries(t, got, s.want(g, now), 0.001)
	}
}
