package reconcile

import (
	"math/rand/v2"
	"testing"
)

// TestUUIDBounds: uuidAbove and uuidBelow map a bound on text keys to the
// nearest canonical uuid text on the right side of it, so that no uuid
// between the two is skipped: checked against uuids drawn near the bound.
func TestUUIDBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	chars := "0123456789abcdefABCDEF-gz/ :"
	near := func(s string) string {
		// A uuid sharing a prefix of s, the rest random.
		b := []byte(randUUID(r))
		for i := 0; i < len(s) && i < len(b) && r.IntN(8) > 0; i++ {
			if uuidCharOK(i, s[i]) {
				b[i] = s[i]
			} else {
				break
			}
		}
		return string(b)
	}
	for range 20000 {
		var s string
		switch r.IntN(3) {
		case 0:
			s = randUUID(r)
		case 1:
			s = randUUID(r)[:r.IntN(37)]
		}
		b := []byte(s)
		for range r.IntN(3) {
			if len(b) > 0 {
				b[r.IntN(len(b))] = chars[r.IntN(len(chars))]
			} else {
				b = append(b, chars[r.IntN(len(chars))])
			}
		}
		s = string(b)
		for _, strict := range []bool{false, true} {
			above, ok := uuidAbove(s, strict)
			if ok && (!isCanonicalUUID(above) || above < s || strict && above == s) {
				t.Fatalf("uuidAbove(%q, %v) = %q", s, strict, above)
			}
			below, bok := uuidBelow(s)
			if bok && (!isCanonicalUUID(below) || below > s) {
				t.Fatalf("uuidBelow(%q) = %q", s, below)
			}
			for range 20 {
				u := near(s)
				if (u > s || !strict && u == s) && (!ok || u < above) {
					t.Fatalf("uuid %q is above %q (strict %v) but below uuidAbove's %q (ok %v)", u, s, strict, above, ok)
				}
				if u <= s && (!bok || u > below) {
					t.Fatalf("uuid %q is at or below %q but above uuidBelow's %q (ok %v)", u, s, below, bok)
				}
			}
		}
	}
}
