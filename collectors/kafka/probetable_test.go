package kafka

import (
	"math/rand/v2"
	"testing"
)

// TestProbeTableAsMap: seeded runs of puts (new keys and replacements),
// lookups (held and absent keys) and rebuilds keeping a random part,
// against a Go map of the same keys, the oracle; keys crowd few topics,
// partitions and offsets, as a cache's do, so that probe runs are long.
func TestProbeTableAsMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 27))
		var tab probeTable
		oracle := map[probeKey]*cachedProbe{}
		key := func() probeKey {
			return newProbeKey(rng.Int32N(3), rng.Int32N(8), rng.Int64N(400)-1, rng.IntN(4) == 0)
		}
		for op := 0; op < 20000; op++ {
			switch r := rng.IntN(1000); {
			case r < 500:
				cp := &cachedProbe{key: key()}
				tab.put(cp)
				oracle[cp.key] = cp
			case r < 998:
				k := key()
				if got, want := tab.get(k), oracle[k]; got != want {
					t.Fatalf("seed %d op %d: get %v = %p, want %p", seed, op, k, got, want)
				}
			default:
				drop := map[probeKey]bool{}
				for k := range oracle {
					if rng.IntN(3) == 0 {
						drop[k] = true
						delete(oracle, k)
					}
				}
				tab.keep(func(cp *cachedProbe) bool { return !drop[cp.key] })
			}
			if tab.len() != len(oracle) {
				t.Fatalf("seed %d op %d: %d entries, want %d", seed, op, tab.len(), len(oracle))
			}
		}
		if len(oracle) < 100 {
			t.Fatalf("seed %d: only %d keys at the end: the table never filled", seed, len(oracle))
		}
		seen := 0
		tab.each(func(cp *cachedProbe) {
			if oracle[cp.key] != cp {
				t.Fatalf("seed %d: each gives %v, not the entry held", seed, cp.key)
			}
			seen++
		})
		if seen != len(oracle) {
			t.Fatalf("seed %d: each gives %d entries, want %d", seed, seen, len(oracle))
		}
		if 4*tab.len() > 3*len(tab.slots) {
			t.Fatalf("seed %d: %d entries in %d slots: more than 3/4 full", seed, tab.len(), len(tab.slots))
		}
	}
}
