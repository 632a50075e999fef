package outbox

import (
	"sort"
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
}

// NewLabelCap returns a cap of max values.
func NewLabelCap(max int) *LabelCap {
	return &LabelCap{Max: max, admitted: map[string]time.Time{}}
}

// Admit records the values seen at now, frees the slots of values not
// seen for ForgetAfter, and admits new values while slots are free.
func (c *LabelCap) Admit(cands []Candidate, now time.Time) {
	for v, seen := range c.admitted {
		if now.Sub(seen) > ForgetAfter {
			delete(c.admitted, v)
		}
	}
	var fresh []Candidate
	merged := map[string]int{}
	for _, cand := range cands {
		if _, ok := c.admitted[cand.Value]; ok {
			c.admitted[cand.Value] = now
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
	if _, ok := c.admitted[v]; ok {
		return v
	}
	return Other
}

// Len is the number of admitted values.
func (c *LabelCap) Len() int { return len(c.admitted) }
