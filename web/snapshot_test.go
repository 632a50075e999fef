package web

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// MaxBy against the brute force it replaced on the scrape path: a Max
// per distinct label pair over seeded random samples.
func TestSnapshotMaxByMatchesMax(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := &Snapshot{Metrics: map[string][]Sample{}}
		for i := 0; i < 200; i++ {
			l := map[string]string{"cluster": "c" + strconv.Itoa(rng.IntN(3)), "group": "g" + strconv.Itoa(rng.IntN(20)), "topic": "t" + strconv.Itoa(rng.IntN(4))}
			s.Metrics["m"] = append(s.Metrics["m"], Sample{Labels: l, Value: rng.Float64()*100 - 10})
		}
		got := s.MaxBy("m", "cluster", "group")
		seen := 0
		for c := 0; c < 3; c++ {
			for g := 0; g < 20; g++ {
				k := [2]string{"c" + strconv.Itoa(c), "g" + strconv.Itoa(g)}
				want, ok := s.Max("m", map[string]string{"cluster": k[0], "group": k[1]})
				v, gok := got[k]
				if ok != gok || v != want {
					t.Fatalf("seed %d %v: MaxBy %v,%v; Max %v,%v", seed, k, v, gok, want, ok)
				}
				if ok {
					seen++
				}
			}
		}
		if seen != len(got) {
			t.Fatalf("seed %d: MaxBy has %d keys, Max found %d", seed, len(got), seen)
		}
	}
}
