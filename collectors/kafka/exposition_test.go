package kafka

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

var updateExposition = flag.Bool("update-exposition", false, "rewrite testdata/exposition.golden")

// replay is one collection's metrics as a prometheus.Collector, so that
// the registry checks and encodes them as a scrape would.
type replay []prometheus.Metric

func (r replay) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(r, ch) }

func (r replay) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r {
		ch <- m
	}
}

// exposition is the text format of one Update of c.
func exposition(t *testing.T, c *Collector) []byte {
	t.Helper()
	ch := make(chan prometheus.Metric, 4096)
	if err := c.Update(kafkaCtx(t), ch); err != nil {
		t.Fatalf("Update: %v", err)
	}
	close(ch)
	var r replay
	for m := range ch {
		r = append(r, m)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(r)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encode: %v", err)
		}
	}
	if text.Len() == 0 {
		t.Fatalf("nothing encoded from %d metrics", len(r))
	}
	return text.Bytes()
}

// TestExpositionUnchanged: the text a fixed kfake state exports (consumer
// groups lagging, caught up and with uncommitted partitions, share groups,
// per-partition series) is byte for byte the golden file, written by the
// code before the collector's caches were made smaller; on the first
// collection of a collector (cold), the next (steady, from its caches) and
// after commits moved and moved back. Refresh with -update-exposition only
// for an intended change of the output.
func TestExpositionUnchanged(t *testing.T) {
	kc := kafkatest.New(t, 2)
	k := kafkaCfg(kc.Brokers(), "/g.*/")
	k.ShareGroups = []string{"/q.*/"}
	k.PerPartition = true
	cl, adm := kafkaAdmin(t, k)
	seedTopic(t, cl, adm, "events", 4, 12)
	seedTopic(t, cl, adm, "orders", 3, 12)
	commit(t, adm, "g-a", "events", map[int32]int64{0: 2, 1: 5, 2: 12, 3: 0})
	commit(t, adm, "g-a", "orders", map[int32]int64{0: 7})
	commit(t, adm, "g-b", "events", map[int32]int64{0: 2, 1: 11, 2: 3, 3: 12})
	commit(t, adm, "g-caught-up", "orders", map[int32]int64{0: 12, 1: 12, 2: 12})
	for i, g := range []string{"q-1", "q-2"} {
		os := kadm.Offsets{}
		for p := int32(0); p < 4; p++ {
			os.Add(kadm.Offset{Topic: "events", Partition: p, At: int64(i*3) + int64(p), LeaderEpoch: -1})
		}
		rs, err := adm.AlterShareGroupOffsets(kafkaCtx(t), g, os)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			t.Fatalf("share group %s: %v", g, err)
		}
	}
	c := newKafka(t, k)
	now := kafkaBase.Add(time.Hour)
	c.now = func() time.Time { return now }
	var all bytes.Buffer
	add := func(step string) {
		fmt.Fprintf(&all, "# %s\n", step)
		all.Write(exposition(t, c))
	}
	add("cold")
	add("steady")
	commit(t, adm, "g-a", "events", map[int32]int64{0: 9})
	add("g-a moved on events/0")
	commit(t, adm, "g-a", "events", map[int32]int64{0: 2})
	add("g-a moved back")
	golden := filepath.Join("testdata", "exposition.golden")
	if *updateExposition {
		if err := os.WriteFile(golden, all.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update-exposition to write it)", err)
	}
	if !bytes.Equal(all.Bytes(), want) {
		t.Errorf("exported text differs from %s:\n%s", golden, lineDiff(string(want), all.String()))
	}
}

// lineDiff lists the lines of want and got that differ, by line number.
func lineDiff(want, got string) string {
	w, g := bytes.Split([]byte(want), []byte("\n")), bytes.Split([]byte(got), []byte("\n"))
	var out bytes.Buffer
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b []byte
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if !bytes.Equal(a, b) {
			fmt.Fprintf(&out, "line %d:\n  want %s\n  got  %s\n", i+1, a, b)
		}
	}
	return out.String()
}
