package outbox

import (
	"reflect"
	"testing"
	"time"
)

// coverCap is a cap of two labels with two slots each and "zz" pinned,
// having admitted (a, x) and (b, y), with c and z folded.
func coverCap(pinned ...string) *SeriesCap {
	c := NewSeriesCap(2, 2, pinned)
	c.Admit([]Combo{
		{Values: []string{"a", "x"}, Rows: 5},
		{Values: []string{"b", "y"}, Rows: 4},
		{Values: []string{"c", "z"}, Rows: 1},
	}, time.Unix(1000, 0))
	return c
}

func TestSeriesCapTargets(t *testing.T) {
	got := coverCap("zz").Targets()
	want := [][]string{{"a", "x"}, {"b", "y"}, {Other, Other}, {"zz", Other}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("targets %q, want %q", got, want)
	}
	one := NewSeriesCap(1, 1, nil)
	one.Admit([]Combo{{Values: []string{"a"}, Rows: 2}, {Values: []string{"b"}, Rows: 1}}, time.Unix(1000, 0))
	if got, want := one.Targets(), [][]string{{"a"}, {Other}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("one label: targets %q, want %q", got, want)
	}
	if got := NewSeriesCap(0, 1, nil).Targets(); !reflect.DeepEqual(got, [][]string{{}}) {
		t.Fatalf("no labels: targets %q, want one empty series", got)
	}
}

func TestCoverTargets(t *testing.T) {
	key := func(vals ...string) string { return joinLabels(vals) }
	set := func(keys ...string) map[string]bool {
		m := map[string]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	for _, tc := range []struct {
		name          string
		pinned        []string
		met, pending  map[string]bool
		partial       bool // the override's read stopped at max_count
		probes        [][]string
		fallback      bool
		probesNothing bool
	}{{
		name: "every series met with a pending row: nothing more to read",
		met:  set(key("a", "x"), key("b", "y"), key(Other, Other)), pending: set(key("a", "x"), key("b", "y"), key(Other, Other)),
		pinned: []string{"zz"}, probesNothing: true,
	}, {
		name: "an admitted combination not met: probed; other not met: the skip-scan",
		met:  set(key("a", "x")), pending: set(key("a", "x")),
		pinned: []string{"zz"}, probes: [][]string{{"b", "y"}}, fallback: true,
	}, {
		name: "met only by claimed rows: its pending rows are probed",
		met:  set(key("a", "x"), key("b", "y"), key(Other, Other)), pending: set(key("a", "x"), key(Other, Other)),
		probes: [][]string{{"b", "y"}},
	}, {
		name: "an override's read stopped at max_count and its folded series not met: the skip-scan",
		met:  set(key("a", "x"), key("b", "y"), key(Other, Other)), pending: set(key("a", "x"), key("b", "y"), key(Other, Other)),
		pinned: []string{"zz"}, partial: true, fallback: true,
	}, {
		name: `"other" with a deadline override is pinned yet folded: the skip-scan`,
		met:  set(key("a", "x"), key("b", "y")), pending: set(key("a", "x"), key("b", "y")),
		pinned: []string{Other}, fallback: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			probes, fallback := coverTargets(coverCap(tc.pinned...), tc.met, tc.pending, func(string) bool { return !tc.partial })
			if tc.probesNothing && (len(probes) > 0 || fallback) {
				t.Fatalf("probes %q, fallback %v: want nothing", probes, fallback)
			}
			if !tc.probesNothing && (!reflect.DeepEqual(probes, tc.probes) || fallback != tc.fallback) {
				t.Fatalf("probes %q, fallback %v: want %q, %v", probes, fallback, tc.probes, tc.fallback)
			}
		})
	}
}

// TestSeriesCapCloneAdmitsApart: the coverage decision admits on a clone;
// the sampler's own cap must not change until apply.
func TestSeriesCapCloneAdmitsApart(t *testing.T) {
	c := NewSeriesCap(2, 3, nil)
	c.Admit([]Combo{{Values: []string{"a", "x"}, Rows: 1}}, time.Unix(1000, 0))
	cl := c.Clone()
	cl.Admit([]Combo{{Values: []string{"b", "y"}, Rows: 1}}, time.Unix(1001, 0))
	if got := c.Fold([]string{"b", "y"}); !reflect.DeepEqual(got, []string{Other, Other}) {
		t.Fatalf("the original cap admitted what its clone did: %q", got)
	}
	if got := cl.Fold([]string{"b", "y"}); !reflect.DeepEqual(got, []string{"b", "y"}) {
		t.Fatalf("the clone folds (b, y) into %q", got)
	}
}
