package outbox

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

func statusOutbox() *config.Outbox {
	return &config.Outbox{
		Status: "status", Pending: []string{"PENDING"}, InFlight: []string{"CLAIMED"},
		Published: []string{"PUBLISHED"}, Dead: []string{"ABANDONED"}, Unknown: []string{"UNSURE"},
		LeaseUntil: "lease_until", Attempts: "attempts", Deadline: 5 * time.Minute,
	}
}

func TestClassify(t *testing.T) {
	withStatusNoInFlight := statusOutbox()
	withStatusNoInFlight.InFlight = nil
	noLease := statusOutbox()
	noLease.LeaseUntil = ""
	ts := &config.Outbox{PublishedAt: "published_at", DeadAt: "dead_at", LeaseUntil: "lease_until"}
	tsClaim := &config.Outbox{PublishedAt: "published_at", ClaimedAt: "claimed_at", LeaseTTL: time.Minute}
	tsClaimNoTTL := &config.Outbox{PublishedAt: "published_at", ClaimedAt: "claimed_at"}
	dop := &config.Outbox{}
	dopLease := &config.Outbox{LeaseUntil: "lease_until"}

	cases := []struct {
		name string
		o    *config.Outbox
		int  bool
		f    Facts
		want State
	}{
		{"status pending", statusOutbox(), false, Facts{Status: "PENDING"}, Pending},
		{"status pending with a stale lease stays pending", statusOutbox(), false, Facts{Status: "PENDING", ClaimSet: true, LeasePassed: true}, Pending},
		{"status claimed live lease", statusOutbox(), false, Facts{Status: "CLAIMED", ClaimSet: true}, InFlight},
		{"status claimed lease passed", statusOutbox(), false, Facts{Status: "CLAIMED", ClaimSet: true, LeasePassed: true}, LeaseExpired},
		{"status claimed no lease column", noLease, false, Facts{Status: "CLAIMED"}, InFlight},
		{"status published", statusOutbox(), false, Facts{Status: "PUBLISHED"}, Published},
		{"status dead", statusOutbox(), false, Facts{Status: "ABANDONED"}, Dead},
		{"status unknown-only is claimed", statusOutbox(), false, Facts{Status: "UNSURE", LeasePassed: true}, LeaseExpired},
		{"status unlisted ignored", statusOutbox(), false, Facts{Status: "WEIRD"}, Ignored},
		{"status without in_flight: lease set claims", withStatusNoInFlight, false, Facts{Status: "PENDING", ClaimSet: true}, InFlight},
		{"status without in_flight: lease passed", withStatusNoInFlight, false, Facts{Status: "PENDING", ClaimSet: true, LeasePassed: true}, LeaseExpired},
		{"status without in_flight: unclaimed", withStatusNoInFlight, false, Facts{Status: "PENDING"}, Pending},
		{"integer status", &config.Outbox{Status: "s", Pending: []string{"0"}, InFlight: []string{"01"}, Published: []string{"2"}}, true, Facts{Status: "1"}, InFlight},
		{"integer status published", &config.Outbox{Status: "s", Pending: []string{"0"}, Published: []string{"2"}}, true, Facts{Status: "2"}, Published},
		{"timestamps published", ts, false, Facts{PublishedSet: true}, Published},
		{"timestamps dead", ts, false, Facts{DeadSet: true}, Dead},
		{"timestamps pending", ts, false, Facts{}, Pending},
		{"timestamps lease live", ts, false, Facts{ClaimSet: true}, InFlight},
		{"timestamps lease expired", ts, false, Facts{ClaimSet: true, LeasePassed: true}, LeaseExpired},
		{"claimed_at+ttl expired", tsClaim, false, Facts{ClaimSet: true, LeasePassed: true}, LeaseExpired},
		{"claimed_at+ttl live", tsClaim, false, Facts{ClaimSet: true}, InFlight},
		{"claimed_at without ttl: no lease to judge", tsClaimNoTTL, false, Facts{ClaimSet: true}, InFlight},
		{"delete-on-publish only pending", dop, false, Facts{}, Pending},
		{"delete-on-publish with lease", dopLease, false, Facts{ClaimSet: true, LeasePassed: true}, LeaseExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRules(c.o, c.int)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Classify(c.f); got != c.want {
				t.Errorf("Classify(%+v) = %v, want %v", c.f, got, c.want)
			}
		})
	}
}

func TestIntegerStatusRejectsText(t *testing.T) {
	o := &config.Outbox{Status: "s", Pending: []string{"PENDING"}, Published: []string{"1"}}
	if _, err := NewRules(o, true); err == nil || !strings.Contains(err.Error(), "PENDING") {
		t.Fatalf("NewRules = %v, want an error naming PENDING", err)
	}
}

func TestUnknown(t *testing.T) {
	r, err := NewRules(statusOutbox(), false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		s    State
		f    Facts
		want bool
	}{
		{"status in unknown", InFlight, Facts{Status: "UNSURE"}, true},
		{"lease expired after an attempt", LeaseExpired, Facts{Status: "CLAIMED", Attempted: true}, true},
		{"lease expired, no attempt", LeaseExpired, Facts{Status: "CLAIMED"}, false},
		{"in flight with attempts", InFlight, Facts{Status: "CLAIMED", Attempted: true}, false},
		{"pending retried", Pending, Facts{Status: "PENDING", Attempted: true}, false},
		{"unknown_when", Pending, Facts{Status: "PENDING", UnknownWhen: true}, true},
		{"dead never", Dead, Facts{Status: "ABANDONED", UnknownWhen: true}, false},
		{"published never", Published, Facts{Status: "PUBLISHED", UnknownWhen: true}, false},
	}
	for _, c := range cases {
		if got := r.Unknown(c.s, c.f); got != c.want {
			t.Errorf("%s: Unknown = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDeadline(t *testing.T) {
	o := &config.Outbox{Deadline: 5 * time.Minute, Deadlines: map[string]time.Duration{"order.paid": 30 * time.Second, Other: time.Hour},
		Labels: []config.Label{{Name: "event_type", Column: "type"}, {Name: "topic", Column: "topic"}}}
	cases := []struct {
		vals []string
		want time.Duration
	}{
		{[]string{"order.paid", "x"}, 30 * time.Second},
		{[]string{"x", "order.paid"}, 5 * time.Minute},
		{[]string{Other, "x"}, time.Hour},
		{nil, 5 * time.Minute},
	}
	for _, c := range cases {
		if got := Deadline(o, c.vals); got != c.want {
			t.Errorf("Deadline(%v) = %v, want %v", c.vals, got, c.want)
		}
	}
	if !Late(31*time.Second, 30*time.Second) || Late(30*time.Second, 30*time.Second) {
		t.Error("Late: want strictly after the deadline")
	}
}

func TestTrimError(t *testing.T) {
	long := strings.Repeat("é", 300)
	got := TrimError(long, 200)
	if utf8.RuneCountInString(got) != 200 || !utf8.ValidString(got) {
		t.Errorf("TrimError: %d runes, valid %v", utf8.RuneCountInString(got), utf8.ValidString(got))
	}
	if got := TrimError("ab\xffc", 200); !utf8.ValidString(got) {
		t.Errorf("TrimError(invalid) = %q, not valid UTF-8", got)
	}
	if got := TrimError("short", 200); got != "short" {
		t.Errorf("TrimError(short) = %q", got)
	}
}

func TestLabelCap(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	c := NewLabelCap(2)
	// Most rows first, then oldest, then value.
	c.Admit([]Candidate{{"a", 5, 1}, {"b", 10, 1}, {"c", 5, 9}, {"d", 1, 100}}, t0)
	for v, want := range map[string]string{"a": Other, "b": "b", "c": "c", "d": Other} {
		if got := c.Fold(v); got != want {
			t.Errorf("Fold(%q) = %q, want %q", v, got, want)
		}
	}
	// An admitted value keeps its slot against a bigger newcomer.
	c.Admit([]Candidate{{"z", 1000, 1}, {"b", 1, 1}, {"c", 1, 1}}, t0.Add(time.Minute))
	if c.Fold("z") != Other || c.Fold("b") != "b" {
		t.Errorf("newcomer displaced an admitted value")
	}
	// Values not seen for ForgetAfter free their slots.
	c.Admit([]Candidate{{"b", 1, 1}}, t0.Add(ForgetAfter+2*time.Minute))
	c.Admit([]Candidate{{"z", 1, 1}, {"y", 1, 1}}, t0.Add(ForgetAfter+3*time.Minute))
	if c.Fold("c") != Other || c.Fold("b") != "b" || c.Fold("y") != "y" || c.Fold("z") != Other {
		t.Errorf("after forgetting: c=%s b=%s y=%s z=%s", c.Fold("c"), c.Fold("b"), c.Fold("y"), c.Fold("z"))
	}
	// Ties broken by value; the same value from several groups adds up.
	c2 := NewLabelCap(1)
	c2.Admit([]Candidate{{"q", 3, 1}, {"p", 2, 1}, {"p", 2, 1}}, t0)
	if c2.Fold("p") != "p" || c2.Fold("q") != Other {
		t.Errorf("merged candidates: p=%s q=%s", c2.Fold("p"), c2.Fold("q"))
	}
}

func TestWatermark(t *testing.T) {
	sec := int64(time.Second / time.Microsecond)
	var w Watermark
	now := int64(1_000_000) * sec
	row := func(id string, p int64) Mark { return Mark{Key: id, At: p} }
	observe := func(ms []Mark, now int64, full bool) string {
		var out []string
		for _, i := range w.Observe(ms, now, full) {
			out = append(out, ms[i].Key)
		}
		return strings.Join(out, ",")
	}
	// First read: the history in the skew window is remembered, not counted.
	if from := w.From(now); from != now-30*sec || w.Started() {
		t.Fatalf("first From = %d", from)
	}
	if got := observe([]Mark{row("old", now-sec)}, now, false); got != "" {
		t.Fatalf("first Observe counted %v", got)
	}
	// Next read re-reads the trailing window: "old" is not counted again.
	now2 := now + 15*sec
	if from := w.From(now2); from != now-30*sec {
		t.Fatalf("From = %d, want the previous read's time minus the skew window", from)
	}
	if got := observe([]Mark{row("old", now-sec), row("a", now+sec), row("b", now+10*sec)}, now2, false); got != "a,b" {
		t.Fatalf("second Observe = %v, want a and b", got)
	}
	// A late commit: published_at before the last read, visible only now.
	now3 := now2 + 15*sec
	if got := observe([]Mark{row("a", now+sec), row("b", now+10*sec), row("late", now2-5*sec)}, now3, false); got != "late" {
		t.Fatalf("third Observe = %v, want only late", got)
	}
	// Memory holds only keys inside the next read's range.
	now4 := now3 + 60*sec
	observe(nil, now4, false)
	if w.Remembered() != 0 {
		t.Errorf("remembered %d keys after the window passed", w.Remembered())
	}
	// Catching up: a full read moves the cursor, the next read starts there.
	now5 := now4 + 100*sec
	if got := observe([]Mark{row("c1", now4+sec), row("c2", now4+2*sec)}, now5, true); got != "c1,c2" {
		t.Fatalf("full Observe = %v", got)
	}
	if from := w.From(now5 + sec); from != now4+2*sec-1 {
		t.Errorf("From while catching up = %d, want cursor-1 = %d", from, now4+2*sec-1)
	}
	if got := observe([]Mark{row("c2", now4+2*sec), row("c3", now4+3*sec)}, now5+sec, false); got != "c3" {
		t.Errorf("after catching up = %v, want c3", got)
	}
	// More marks at one instant than a read returns: the second full read
	// of the same instant steps past it instead of looping.
	same := []Mark{row("s1", now5+5*sec), row("s2", now5+5*sec)}
	observe(same, now5+10*sec, true)
	observe(same, now5+11*sec, true)
	if from := w.From(0); from != now5+5*sec {
		t.Errorf("From after a stuck instant = %d, want %d", from, now5+5*sec)
	}
}

func TestHistogram(t *testing.T) {
	h := Histogram{Bounds: []float64{1, 10}}
	for _, v := range []float64{0.5, 1, 5, 50} {
		h.Observe(v)
	}
	b := h.Buckets()
	if b[1] != 2 || b[10] != 3 || h.Count != 4 || h.Sum != 56.5 {
		t.Errorf("buckets %v count %d sum %v", b, h.Count, h.Sum)
	}
}

func TestBloated(t *testing.T) {
	cases := []struct {
		size   int64
		tuples float64
		want   bool
	}{
		{512 << 20, 10000, true},    // a drained 2M backlog
		{512 << 20, 2000000, false}, // the backlog itself
		{50 << 20, 0, false},        // small: not worth a rebuild
		{200 << 20, -1, false},      // never vacuumed: no estimate
		{200 << 20, 0, true},
	}
	for _, c := range cases {
		if got := Bloated(c.size, c.tuples); got != c.want {
			t.Errorf("Bloated(%d MiB, %v) = %v, want %v", c.size>>20, c.tuples, got, c.want)
		}
	}
}
