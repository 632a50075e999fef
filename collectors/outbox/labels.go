package outbox

import (
	"sort"
	"strings"
	"time"
)

// Other is the label value that values beyond max_label_values fold into.
const Other = "other"

// ForgetAfter is how long a label value (or a combination of values) that
// is no longer seen keeps its series and its slot under max_label_values.
// After it, the value's slot is free for another value and its series
// disappear.
const ForgetAfter = time.Hour

// Candidate is one value of a label column seen in a sample, with what
// ranks it for a slot.
type Candidate struct {
	Value string
	// Rows is how many rows had the value in this sample.
	Rows int64
	// OldestAge is the age in seconds of the oldest of those rows.
	OldestAge float64
}

// LabelCap bounds the distinct values of one label column. A value keeps
// its own series once admitted and while it is seen at least once every
// ForgetAfter; values beyond Max fold into Other.
//
// Which values are admitted is deterministic: when a sample brings more
// new values than there are free slots, those with the most rows win,
// then those with the oldest row, then the smaller value. A value once
// admitted is not displaced by a bigger newcomer, so a counter's series
// does not flip between its own value and Other from one scrape to the
// next.
type LabelCap struct {
	Max      int
	admitted map[string]time.Time
	// pinned values always have their own series and take no slot: the
	// values named under deadlines, so that an override never folds into
	// Other and loses its deadline. They are a list in
	// the config, so they stay bounded.
	pinned map[string]bool
}

// NewLabelCap returns a cap of max values, plus the pinned ones.
func NewLabelCap(max int, pinned ...string) *LabelCap {
	c := &LabelCap{Max: max, admitted: map[string]time.Time{}, pinned: map[string]bool{}}
	for _, p := range pinned {
		c.pinned[p] = true
	}
	return c
}

// Pinned reports whether v is pinned.
func (c *LabelCap) Pinned(v string) bool { return c.pinned[v] }

// Admit records the values seen at now, frees the slots of values not
// seen for ForgetAfter, and admits new values while slots are free.
func (c *LabelCap) Admit(cands []Candidate, now time.Time) {
	for v, seen := range c.admitted {
		if now.Sub(seen) > ForgetAfter {
			delete(c.admitted, v)
		}
	}
	// With no slot free no newcomer can be admitted: skip ranking them (a
	// capped sample may bring thousands).
	full := len(c.admitted) >= c.Max
	var fresh []Candidate
	merged := map[string]int{}
	for _, cand := range cands {
		if c.pinned[cand.Value] {
			continue
		}
		if _, ok := c.admitted[cand.Value]; ok {
			c.admitted[cand.Value] = now
			continue
		}
		if full {
			continue
		}
		if i, ok := merged[cand.Value]; ok {
			fresh[i].Rows += cand.Rows
			if cand.OldestAge > fresh[i].OldestAge {
				fresh[i].OldestAge = cand.OldestAge
			}
			continue
		}
		merged[cand.Value] = len(fresh)
		fresh = append(fresh, cand)
	}
	sort.Slice(fresh, func(i, j int) bool {
		a, b := fresh[i], fresh[j]
		if a.Rows != b.Rows {
			return a.Rows > b.Rows
		}
		if a.OldestAge != b.OldestAge {
			return a.OldestAge > b.OldestAge
		}
		return a.Value < b.Value
	})
	for _, cand := range fresh {
		if len(c.admitted) >= c.Max {
			break
		}
		c.admitted[cand.Value] = now
	}
}

// Fold returns v if it has its own series, else Other.
func (c *LabelCap) Fold(v string) string {
	if _, ok := c.admitted[v]; ok || c.pinned[v] {
		return v
	}
	return Other
}

// Len is the number of admitted values.
func (c *LabelCap) Len() int { return len(c.admitted) }

// SeriesCap bounds the number of series of an outbox, not only the
// values of each label column: three columns of 100 values each would
// otherwise allow a million series. Each column keeps
// its own LabelCap; then at most max combinations of the folded values
// keep their own series, and every other combination folds into
// (first value if pinned else Other, Other, ...). So an outbox has at most
// max + pinned + 1 series, and a first-label value with a deadline
// override keeps its value, hence its deadline, even when folded.
type SeriesCap struct {
	cols   []*LabelCap
	tuples *LabelCap // nil with fewer than two labels
}

// NewSeriesCap returns the cap of an outbox with n label columns; pinned
// are the first column's values that keep their own series.
func NewSeriesCap(n, max int, pinned []string) *SeriesCap {
	c := &SeriesCap{}
	for i := 0; i < n; i++ {
		if i == 0 {
			c.cols = append(c.cols, NewLabelCap(max, pinned...))
		} else {
			c.cols = append(c.cols, NewLabelCap(max))
		}
	}
	if n > 1 {
		c.tuples = NewLabelCap(max)
	}
	return c
}

// Combo is one combination of label values seen in a sample, ranked like
// a Candidate.
type Combo struct {
	Values    []string
	Rows      int64
	OldestAge float64
}

// Admit admits column values, then combinations, from what a sample saw.
func (c *SeriesCap) Admit(combos []Combo, now time.Time) {
	for i, lc := range c.cols {
		cands := make([]Candidate, len(combos))
		for j, x := range combos {
			cands[j] = Candidate{Value: x.Values[i], Rows: x.Rows, OldestAge: x.OldestAge}
		}
		lc.Admit(cands, now)
	}
	if c.tuples == nil {
		return
	}
	cands := make([]Candidate, len(combos))
	for j, x := range combos {
		cands[j] = Candidate{Value: joinLabels(c.foldColumns(x.Values)), Rows: x.Rows, OldestAge: x.OldestAge}
	}
	c.tuples.Admit(cands, now)
}

func (c *SeriesCap) foldColumns(vals []string) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = c.cols[i].Fold(v)
	}
	return out
}

// Fold returns the series label values of a combination.
func (c *SeriesCap) Fold(vals []string) []string {
	out, _ := c.FoldKey(vals)
	return out
}

// FoldKey is Fold with the key of the series (joinLabels of its
// values). A capped sample folds tens of thousands of groups: the
// combination of folded values is looked up without building a string
// of it, and the key is built once.
func (c *SeriesCap) FoldKey(vals []string) ([]string, string) {
	out := c.foldColumns(vals)
	if c.tuples != nil {
		var arr [256]byte
		b := arr[:0]
		for i, v := range out {
			if i > 0 {
				b = append(b, '\xff')
			}
			b = append(b, v...)
		}
		if _, ok := c.tuples.admitted[string(b)]; !ok {
			for i := range out {
				if i > 0 || !c.cols[0].Pinned(vals[0]) {
					out[i] = Other
				}
			}
		}
	}
	return out, joinLabels(out)
}

// joinLabels is the key of a combination of label values.
func joinLabels(vals []string) string { return strings.Join(vals, "\xff") }

// foldKey is the key of the series pc folds vals into.
func foldKey(pc *SeriesCap, vals []string) string {
	_, k := pc.FoldKey(vals)
	return k
}
