package collectors

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// CutLabel returns v if it is at most max bytes long; else its first
// bytes (whole UTF-8 characters) followed by a visible marker,
// "…[cut 0123456789]", that carries the first 10 hex digits of the value's
// SHA-256, all in max bytes. The marker tells a reader the value is not
// whole, and keeps two long values that share a prefix apart, so that
// they stay two series (and never collide as one label set, which would
// fail the scrape). A label value from a table is unbounded: one 1 MB
// value copied into every series of a label set would make each scrape
// megabytes, and a Prometheus with label_value_length_limit or
// body_size_limit would drop the whole target. max must be at least
// CutMarkerLen + 1.
func CutLabel(v string, max int) string {
	if len(v) <= max {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	marker := "…[cut " + hex.EncodeToString(sum[:5]) + "]"
	n := max - len(marker)
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n] + marker
}

// CutMarkerLen is the length in bytes of CutLabel's marker.
const CutMarkerLen = len("…[cut ]") + 10

// CutLabels cuts each of vs (CutLabel) in place and returns it.
func CutLabels(vs []string, max int) []string {
	for i, v := range vs {
		vs[i] = CutLabel(v, max)
	}
	return vs
}
