package kafka

import (
	"reflect"
	"testing"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Offsets
		lag  int64
		ok   bool
	}{
		{"committed behind", Offsets{Commit: 4, End: 10}, 6, true},
		{"committed at end", Offsets{Commit: 10, End: 10}, 0, true},
		{"commit past end is 0, not negative", Offsets{Commit: 12, End: 10}, 0, true},
		{"commit below log start counts from commit (kadm)", Offsets{Commit: 2, Start: 5, StartKnown: true, End: 10}, 8, true},
		{"uncommitted counts from log start", Offsets{Commit: NoCommit, Start: 3, StartKnown: true, End: 10}, 7, true},
		{"uncommitted, empty log", Offsets{Commit: NoCommit, Start: 10, StartKnown: true, End: 10}, 0, true},
		{"uncommitted, start unknown", Offsets{Commit: NoCommit, End: 10}, 0, false},
		{"start past end after deletion race", Offsets{Commit: NoCommit, Start: 11, StartKnown: true, End: 10}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lag, ok := Messages(tc.o)
			if lag != tc.lag || ok != tc.ok {
				t.Fatalf("Messages(%+v) = %d, %v; want %d, %v", tc.o, lag, ok, tc.lag, tc.ok)
			}
		})
	}
}

func TestOldest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Offsets
		from   int64
		behind bool
	}{
		{"at the commit", Offsets{Commit: 4, End: 10}, 4, true},
		{"caught up", Offsets{Commit: 10, End: 10}, 10, false},
		{"commit deleted by retention: log start", Offsets{Commit: 2, Start: 5, StartKnown: true, End: 10}, 5, true},
		{"uncommitted: log start", Offsets{Commit: NoCommit, Start: 3, StartKnown: true, End: 10}, 3, true},
		{"uncommitted, empty log", Offsets{Commit: NoCommit, Start: 7, StartKnown: true, End: 7}, 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, behind := Oldest(tc.o)
			if from != tc.from || behind != tc.behind {
				t.Fatalf("Oldest(%+v) = %d, %v; want %d, %v", tc.o, from, behind, tc.from, tc.behind)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name  string
		o     Offsets
		probe *Probe
		want  Partition
	}{
		{"caught up needs no probe", Offsets{Commit: 10, End: 10}, nil,
			Partition{Messages: 0, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"record at commit", Offsets{Commit: 4, End: 10}, &Probe{From: 4, Next: 10, Stable: 10, Found: true, Offset: 4, Timestamp: ago(90 * time.Second)},
			Partition{Messages: 6, MessagesOK: true, Seconds: 90, SecondsOK: true}},
		{"timestamp in the future is 0, not negative", Offsets{Commit: 4, End: 10}, &Probe{From: 4, Next: 5, Stable: 10, Found: true, Offset: 4, Timestamp: now.Add(time.Minute)},
			Partition{Messages: 6, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"no probe: time lag unknown", Offsets{Commit: 4, End: 10}, nil,
			Partition{Messages: 6, MessagesOK: true}},
		{"only a commit marker left (Burrow #570): Kafka's LAG 1, time lag 0", Offsets{Commit: 5, End: 6}, &Probe{From: 5, Next: 6, Stable: 6},
			Partition{Messages: 1, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"aborted records and markers only: counted as Kafka does", Offsets{Commit: 5, End: 10}, &Probe{From: 5, Next: 10, Stable: 10},
			Partition{Messages: 5, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"retention deleted up to the high watermark, commit at 5: LAG 25", Offsets{Commit: 5, Start: 30, StartKnown: true, End: 30}, nil,
			Partition{Messages: 25, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"retention deleted to 20, commit at 5: LAG 25, age of the record at 20", Offsets{Commit: 5, Start: 20, StartKnown: true, End: 30}, &Probe{From: 20, Next: 21, Stable: 30, Found: true, Offset: 20, Timestamp: ago(time.Minute)},
			Partition{Messages: 25, MessagesOK: true, Seconds: 60, SecondsOK: true}},
		{"first data record beyond the listed end", Offsets{Commit: 5, End: 6}, &Probe{From: 5, Next: 8, Stable: 8, Found: true, Offset: 6, Timestamp: ago(time.Hour)},
			Partition{Messages: 1, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"open transaction: nothing readable yet", Offsets{Commit: 5, End: 9}, &Probe{From: 5, Next: 5, Stable: 5},
			Partition{Messages: 4, MessagesOK: true, Seconds: 0, SecondsOK: true}},
		{"read stopped short: unknown", Offsets{Commit: 5, End: 9}, &Probe{From: 5, Next: 6, Stable: 9},
			Partition{Messages: 4, MessagesOK: true}},
		{"uncommitted, start unknown", Offsets{Commit: NoCommit, End: 9}, nil,
			Partition{}},
		{"record without a timestamp (NO_TIMESTAMP): unknown, not 56 years", Offsets{Commit: 4, End: 10}, &Probe{From: 4, Next: 5, Stable: 10, Found: true, Offset: 4},
			Partition{Messages: 6, MessagesOK: true}},
		{"read bounded after a run of aborted records: unknown", Offsets{Commit: 0, End: 900}, &Probe{From: 0, Next: 400, Stable: 900},
			Partition{Messages: 900, MessagesOK: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.o, tc.probe, now)
			if got != tc.want {
				t.Fatalf("Decide = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Offsets
		want int64
	}{
		{"commit below the log start", Offsets{Commit: 2, Start: 5, StartKnown: true, End: 10}, 3},
		{"commit at the log start", Offsets{Commit: 5, Start: 5, StartKnown: true, End: 10}, 0},
		{"commit above", Offsets{Commit: 7, Start: 5, StartKnown: true, End: 10}, 0},
		{"never committed: nothing the group lost", Offsets{Commit: NoCommit, Start: 5, StartKnown: true, End: 10}, 0},
		{"start unknown", Offsets{Commit: 2, End: 10}, 0},
		{"everything deleted", Offsets{Commit: 0, Start: 10, StartKnown: true, End: 10}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Lost(tc.o); got != tc.want {
				t.Fatalf("Lost(%+v) = %d, want %d", tc.o, got, tc.want)
			}
		})
	}
}

func TestProbeUsableAndContinue(t *testing.T) {
	found := Probe{From: 3, Next: 9, Stable: 9, Found: true, Offset: 4}
	if !found.Usable(100) {
		t.Fatal("a found record stays usable while the commit does not move")
	}
	markers := Probe{From: 5, Next: 6, Stable: 6}
	if !markers.Usable(6) {
		t.Fatal("markers up to the high watermark: usable")
	}
	if markers.Usable(8) {
		t.Fatal("records appended after the markers: must be read again")
	}
	// A read cut short by the round bound is continued, not restarted.
	short := Probe{From: 0, Next: 400, Stable: 900}
	if short.Usable(900) {
		t.Fatal("a bounded read that stopped short must be continued")
	}
	cont := markers.Continue(Probe{From: 6, Next: 8, Stable: 8, Found: true, Offset: 7})
	if cont.From != 5 || !cont.Found || cont.Offset != 7 {
		t.Fatalf("Continue = %+v", cont)
	}
}

func TestSum(t *testing.T) {
	for _, tc := range []struct {
		name string
		ps   []Partition
		want Topic
	}{
		{"sum and max", []Partition{
			{Messages: 3, MessagesOK: true, Seconds: 10, SecondsOK: true},
			{Messages: 4, MessagesOK: true, Seconds: 30, SecondsOK: true},
			{Messages: 0, MessagesOK: true, Seconds: 0, SecondsOK: true},
		}, Topic{Messages: 7, MessagesOK: true, Seconds: 30, SecondsOK: true}},
		{"unknown partitions make it partial", []Partition{
			{Messages: 3, MessagesOK: true, Seconds: 10, SecondsOK: true},
			{Messages: 4, MessagesOK: true},
			{},
		}, Topic{Messages: 7, MessagesOK: true, Seconds: 10, SecondsOK: true, Partial: true, Unknown: 2}},
		{"nothing known: no series", []Partition{{}, {}}, Topic{Partial: true, Unknown: 2}},
		{"no partitions: no series", nil, Topic{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sum(tc.ps); got != tc.want {
				t.Fatalf("Sum = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func patterns(t *testing.T, ss ...string) []Matcher {
	t.Helper()
	var out []Matcher
	for _, s := range ss {
		p, err := config.ParsePattern(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestSelectGroups(t *testing.T) {
	listed := []Listed{
		{Name: "search-index", Type: "classic"},
		{Name: "notify-email", Type: "consumer"},
		{Name: "notify-sms", Type: ""},
		{Name: "notify-share", Type: "share"},
		{Name: "other", Type: "classic"},
		{Name: "search-index-old", Type: "classic"},
	}
	for _, tc := range []struct {
		name     string
		patterns []string
		want     []Listed
	}{
		{"empty list selects nothing", nil, nil},
		{"exact name only", []string{"search-index"}, []Listed{{Name: "search-index", Type: "classic"}}},
		{"regex is anchored; share groups left out; untyped is classic", []string{"/notify-.*/", "search-index"}, []Listed{
			{Name: "notify-email", Type: "consumer"},
			{Name: "notify-sms", Type: "classic"},
			{Name: "search-index", Type: "classic"},
		}},
		{"no match", []string{"/x.*/"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SelectGroups(listed, patterns(t, tc.patterns...))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("SelectGroups = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestTopics(t *testing.T) {
	all := Topics([]string{"b", "a"}, []string{"a", "c"}, []string{"d"}, nil)
	if !reflect.DeepEqual(all, []string{"a", "b", "c", "d"}) {
		t.Fatalf("Topics = %v", all)
	}
	f := TopicFilter(patterns(t, "a", "/c|d/"))
	got := Topics([]string{"b", "a"}, []string{"a", "c"}, []string{"d", "dd"}, f)
	if !reflect.DeepEqual(got, []string{"a", "c", "d"}) {
		t.Fatalf("filtered Topics = %v", got)
	}
	if TopicFilter(nil) != nil {
		t.Fatal("no topic patterns keeps every topic")
	}
}

// TestUnsupported: matching share and streams groups are named (and
// logged by the collector) instead of vanishing; classic, KIP-848 and
// untyped groups, and groups matching no pattern, are not.
func TestUnsupported(t *testing.T) {
	listed := []Listed{
		{Name: "notify-share", Type: "share"},
		{Name: "notify-streams", Type: "streams"},
		{Name: "notify-email", Type: "consumer"},
		{Name: "notify-sms", Type: ""},
		{Name: "notify-classic", Type: "classic"},
		{Name: "other-share", Type: "share"},
	}
	got := Unsupported(listed, patterns(t, "/notify-.*/"))
	want := []Listed{{Name: "notify-share", Type: "share"}, {Name: "notify-streams", Type: "streams"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Unsupported = %+v; want %+v", got, want)
	}
}
