package collectors

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCutLabel: values up to max are whole; longer ones are at most max
// bytes, valid UTF-8, begin with the value's own prefix, end with the
// marker, and two long values sharing a prefix stay apart.
func TestCutLabel(t *testing.T) {
	if got := CutLabel("order.paid", 32); got != "order.paid" {
		t.Fatalf("short value changed: %q", got)
	}
	exact := strings.Repeat("x", 32)
	if got := CutLabel(exact, 32); got != exact {
		t.Fatalf("a value of exactly max bytes changed: %q", got)
	}
	long := strings.Repeat("é", 600000) // 1.2 MB, two bytes a character
	for _, max := range []int{CutMarkerLen + 1, 32, 33, 128, 129} {
		got := CutLabel(long, max)
		if len(got) > max || !utf8.ValidString(got) || !strings.Contains(got, "…[cut ") ||
			!strings.HasPrefix(long, strings.SplitN(got, "…[cut ", 2)[0]) {
			t.Errorf("max %d: %q (%d bytes)", max, got, len(got))
		}
	}
	a, b := strings.Repeat("a", 200)+"1", strings.Repeat("a", 200)+"2"
	if CutLabel(a, 128) == CutLabel(b, 128) {
		t.Errorf("two long values sharing a prefix were cut to one: %q", CutLabel(a, 128))
	}
	if got := CutLabel(a, 128); len(got) != 128 || !strings.HasPrefix(got, strings.Repeat("a", 128-CutMarkerLen)) {
		t.Errorf("cut value %q (%d bytes): want the whole room used", got, len(got))
	}
	vs := CutLabels([]string{"x", a}, 64)
	if vs[0] != "x" || len(vs[1]) > 64 {
		t.Errorf("CutLabels: %q", vs)
	}
}
