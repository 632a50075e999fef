package kafka

import (
	"math/rand"
	"testing"
	"time"
)

// TestDecideCached holds the plan's shortcut to Decide: for seeded random
// offsets and cached probes (found or not, stamped or not, records at,
// below and past the high watermark, open transactions), deciding a
// partition from the lag taken when its probe was looked up gives what
// Decide gives for the Probe the entry holds, bit for bit.
func TestDecideCached(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 40, 0, 123456789, time.UTC)
	rng := rand.New(rand.NewSource(27))
	small := func() int64 { return rng.Int63n(40) }
	checked, aged := 0, 0
	for i := 0; i < 200000; i++ {
		o := Offsets{Commit: small() - 2, Start: small(), StartKnown: rng.Intn(4) > 0, End: small()}
		from, behind := Oldest(o)
		if !behind {
			continue
		}
		cp := &cachedProbe{key: newProbeKey(0, 0, from, rng.Intn(2) == 0),
			next: from + small(), stable: from + small() - 5, offset: from + small(), found: rng.Intn(2) == 0}
		switch rng.Intn(4) {
		case 0:
		case 1:
			// The zero time's milliseconds: get's Timestamp is zero.
			cp.stamped, cp.ms = true, time.Time{}.UnixMilli()
		default:
			// Within a day of now, either side (a clock ahead).
			cp.stamped, cp.ms = true, now.UnixMilli()+rng.Int63n(2*86400000)-86400000
		}
		pr := cp.get()
		want := Decide(o, &pr, now)
		pp := partPlan{o: o}
		pp.setProbe(cp)
		got := decideCached(o, pp.lagKind, pp.lagMs, now)
		if got != want {
			t.Fatalf("case %d: offsets %+v, probe %+v: cached decision %+v, Decide %+v", i, o, pr, got, want)
		}
		checked++
		if want.SecondsOK && want.Seconds > 0 {
			aged++
		}
	}
	if checked < 10000 || aged < 1000 {
		t.Fatalf("only %d partitions behind, %d with an age: the generator misses the cases", checked, aged)
	}
}
