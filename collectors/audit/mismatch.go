package audit

import (
	"fmt"
	"strings"
)

// An id written differently on the two sides (case, quotes, a UUID
// without dashes, a prefix) turns every judged published row into
// "missing": thousands of false silent losses. A real
// loss and a mismatch differ in what the topics hold: after a real loss
// the topics' recent ids are still rows of the outbox; after a mismatch
// none of them is. So each comparison also looks up the tailer's recent
// sampled ids (the last recentIDs, as text) among the rows it reads, and
// calls the match rate implausible only when both directions fail:
//
//   - at least minJudged published rows were judged and under a tenth of
//     them were found on the topics, and
//   - at least minRecent recent topic ids fall in the judged span and
//     under a tenth of them are rows the comparison read.
//
// Then the missing gauge is withheld (not exported), the collector fails
// with the mismatch named, and the report says what differs. A relay
// that loses everything while another producer fills the same topics with
// other ids looks the same, and is reported the same way: as a failing
// audit, not as silent loss.
const (
	minJudged = 20
	minRecent = 5
)

// matchStats is what a comparison saw of the two directions.
type matchStats struct {
	Judged  int `json:"published_judged"` // published rows judged
	Matched int `json:"published_found"`  // of those, found on the topics
	Recent  int `json:"recent_topic_ids"` // recent topic ids in the judged span
	Found   int `json:"recent_found"`     // of those, rows of the outbox
	// Normalized counts recent topic ids that match a row only once both
	// are normalized (case, quotes, braces, dashes, spaces).
	Normalized int `json:"recent_found_normalized"`
}

// matchProbe collects matchStats while a comparison streams its rows.
type matchProbe struct {
	stats    matchStats
	recent   map[string]bool // recent topic ids in span → seen as a row
	norm     map[string]bool // their normalized forms → seen
	topicEx  []string        // examples of recent topic ids
	tableEx  []string        // examples of missing rows' ids
	seenNorm map[string]bool
}

func newMatchProbe(ring []recentID, from, to int64) *matchProbe {
	p := &matchProbe{recent: map[string]bool{}, norm: map[string]bool{}, seenNorm: map[string]bool{}}
	for _, r := range ring {
		if r.id == "" || r.ts < from || r.ts > to {
			continue
		}
		if _, dup := p.recent[r.id]; dup {
			continue
		}
		p.recent[r.id] = false
		p.norm[normalizeID(r.id)] = false
		if len(p.topicEx) < 3 {
			p.topicEx = append(p.topicEx, r.id)
		}
	}
	p.stats.Recent = len(p.recent)
	return p
}

// row notes one row the comparison read and its verdict.
func (p *matchProbe) row(id string, c Class, v Verdict) {
	if seen, ok := p.recent[id]; ok && !seen {
		p.recent[id] = true
		p.stats.Found++
	}
	if n := normalizeID(id); !p.seenNorm[n] {
		if _, ok := p.norm[n]; ok {
			p.seenNorm[n] = true
			p.stats.Normalized++
		}
	}
	if c != Published {
		return
	}
	switch v {
	case Consistent:
		p.stats.Judged++
		p.stats.Matched++
	case MissingInBroker:
		p.stats.Judged++
		if len(p.tableEx) < 3 {
			p.tableEx = append(p.tableEx, id)
		}
	}
}

// verdict names the mismatch, or "" when the match rate is plausible.
func (p *matchProbe) verdict() string {
	s := p.stats
	if !implausible(s) {
		return ""
	}
	return fmt.Sprintf("%d of %d judged published rows and %d of %d recent topic ids found on the other side: %s",
		s.Matched, s.Judged, s.Found, s.Recent, Diagnose(p.tableEx, p.topicEx, s.Normalized > 0))
}

func implausible(s matchStats) bool {
	return s.Judged >= minJudged && s.Matched*10 < s.Judged && s.Recent >= minRecent && s.Found*10 < s.Recent
}

// normalizeID folds the differences Diagnose names: letter case,
// surrounding quotes and braces, dashes and white space.
func normalizeID(id string) string {
	s := strings.TrimSpace(id)
	s = strings.Trim(s, `"'{}`)
	s = strings.ReplaceAll(s, "-", "")
	return strings.ToLower(strings.TrimSpace(s))
}

// Diagnose names how the table's ids (examples tableIDs) and the topics'
// (topicIDs) are likely written differently. normalizedMatch says that
// some ids matched once normalized.
func Diagnose(tableIDs, topicIDs []string, normalizedMatch bool) string {
	if len(tableIDs) == 0 || len(topicIDs) == 0 {
		return "no examples to compare"
	}
	t, k := shapeOf(tableIDs[0]), shapeOf(topicIDs[0])
	var diffs []string
	if t.quoted != k.quoted {
		diffs = append(diffs, which(k.quoted, "the topic's ids are quoted", "the table's ids are quoted")+
			" (a JSON-encoded string in a header or key?)")
	}
	if t.braced != k.braced {
		diffs = append(diffs, which(k.braced, "the topic's ids are in braces", "the table's ids are in braces"))
	}
	if t.dashes != k.dashes && t.hexLen == k.hexLen && t.hexLen > 0 {
		diffs = append(diffs, which(k.dashes == 0, "the topic writes UUIDs without dashes", "the table's UUIDs have no dashes"))
	}
	if t.upper != k.upper && (t.upper || k.upper) {
		diffs = append(diffs, which(k.upper, "the topic's ids are upper case", "the table's ids are upper case"))
	}
	if t.space != k.space {
		diffs = append(diffs, "white space around the ids differs")
	}
	what := strings.Join(diffs, "; ")
	if what == "" {
		what = "the formats differ"
		if !normalizedMatch {
			what = "no id is on both sides (a different id field or event_id setting, or relays that publish these rows elsewhere?)"
		}
	}
	return fmt.Sprintf("%s; table ids look like %q, topic ids like %q", what, tableIDs[0], topicIDs[0])
}

func which(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

type idShape struct {
	quoted, braced, upper, space bool
	dashes                       int
	hexLen                       int // hex digits, when the id is hex and dashes only
}

func shapeOf(id string) idShape {
	var s idShape
	s.space = strings.TrimSpace(id) != id
	in := strings.TrimSpace(id)
	s.quoted = len(in) >= 2 && (in[0] == '"' || in[0] == '\'') && in[len(in)-1] == in[0]
	in = strings.Trim(in, `"'`)
	s.braced = strings.HasPrefix(in, "{") && strings.HasSuffix(in, "}")
	in = strings.Trim(in, "{}")
	hex := true
	for _, c := range in {
		switch {
		case c == '-':
			s.dashes++
		case c >= 'A' && c <= 'Z':
			s.upper = true
			if c > 'F' {
				hex = false
			} else {
				s.hexLen++
			}
		case c >= '0' && c <= '9' || c >= 'a' && c <= 'f':
			s.hexLen++
		default:
			hex = false
		}
	}
	if !hex {
		s.hexLen = 0
	}
	return s
}
