package kafka

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestFetchCommitsAsKadm: fetchCommits answers what kadm.FetchManyOffsets
// answers (its oracle), group by group and partition by partition, for
// groups committed at seeded random offsets on some partitions of one or
// two topics, with metadata, and for a group that never committed.
func TestFetchCommitsAsKadm(t *testing.T) { onBoth(t, 3, fetchCommitsAsKadm) }

func fetchCommitsAsKadm(t *testing.T, e kenv) {
	k := kafkaCfg(e.Brokers(), e.pat("/g.*/"))
	cl, adm := kafkaAdmin(t, k)
	topics := []string{e.n("a"), e.n("b")}
	for _, tp := range topics {
		seedTopic(t, cl, adm, tp, 6, 5)
	}
	rng := rand.New(rand.NewPCG(20, 13))
	var groups []string
	for g := 0; g < 12; g++ {
		name := e.n(fmt.Sprintf("g%02d", g))
		groups = append(groups, name)
		os := kadm.Offsets{}
		for _, tp := range topics[:1+rng.IntN(2)] {
			for p := int32(0); p < 6; p++ {
				if rng.IntN(3) > 0 {
					os.Add(kadm.Offset{Topic: tp, Partition: p, At: rng.Int64N(6), LeaderEpoch: -1, Metadata: fmt.Sprint("m", g)})
				}
			}
		}
		if len(os) == 0 {
			os.Add(kadm.Offset{Topic: topics[0], Partition: 0, At: 1, LeaderEpoch: -1})
		}
		if err := adm.CommitAllOffsets(kafkaCtx(t), name, os); err != nil {
			t.Fatal(err)
		}
	}
	groups = append(groups, e.n("never-committed"))
	got := fetchCommits(kafkaCtx(t), cl, groups)
	want := adm.FetchManyOffsets(kafkaCtx(t), groups...)
	if len(got) != len(want) || len(got) != len(groups) {
		t.Fatalf("%d groups answered, kadm %d, asked %d", len(got), len(want), len(groups))
	}
	for _, g := range groups {
		if w := asFetched(want[g]); !reflect.DeepEqual(got[g], w) {
			t.Errorf("group %s:\n got %+v\nwant %+v", g, got[g], w)
		}
	}
	if n := len(got[groups[0]].commits); n == 0 {
		t.Fatal("the first group's commits are missing: nothing compared")
	}
}

// asFetched is kadm's answer for one group in fetchCommits' shape.
func asFetched(r kadm.FetchOffsetsResponse) fetchedGroup {
	f := fetchedGroup{err: r.Err}
	if r.Fetched == nil {
		return f
	}
	f.commits = map[string][]committed{}
	for t, parts := range r.Fetched {
		n := int32(0)
		for p := range parts {
			n = max(n, p+1)
		}
		cs := make([]committed, n)
		for p, o := range parts {
			cs[p] = committed{at: o.At, code: errCode(o.Err), ok: true}
		}
		f.commits[t] = cs
	}
	return f
}
