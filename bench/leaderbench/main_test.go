package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestArmRuns: each arm ends after as many reconcile runs as the
// schedule's @every interval fits in -for, or after -runs when given;
// a schedule without an interval needs -runs.
func TestArmRuns(t *testing.T) {
	cases := []struct {
		schedule string
		dur      time.Duration
		runs     int64
		want     int64
		err      string
	}{
		{"@every 30s", 10 * time.Minute, -1, 20, ""},
		{"@every 45s", 10 * time.Minute, -1, 13, ""},
		{"@every 30s", 10 * time.Minute, 7, 7, ""},
		{"@every 30s", 10 * time.Minute, 0, 0, ""},
		{"0 * * * *", 10 * time.Minute, -1, 0, "no @every interval"},
		{"@every soon", 10 * time.Minute, -1, 0, "no duration"},
		{"0 * * * *", 10 * time.Minute, 3, 3, ""},
	}
	for _, c := range cases {
		got, err := armRuns(opts{schedule: c.schedule, dur: c.dur, runs: c.runs})
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q, -for %v, -runs %d: error %v, want one saying %q", c.schedule, c.dur, c.runs, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q, -for %v, -runs %d: %d, %v; want %d", c.schedule, c.dur, c.runs, got, err, c.want)
		}
	}
}

func TestParseJMX(t *testing.T) {
	out := `kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=outbox.events:Count=1300174
kafka.server:type=BrokerTopicMetrics,name=TotalFetchRequestsPerSec,topic=outbox.events:Count=1785
kafka.server:type=socket-server-metrics,listener=PLAINTEXT,networkProcessor=0:outgoing-byte-total=700000.0
kafka.server:type=socket-server-metrics,listener=PLAINTEXT,networkProcessor=1:outgoing-byte-total=686344.0
kafka.server:type=socket-server-metrics,listener=PLAINTEXT,networkProcessor=0:response-total=500.0
kafka.server:type=socket-server-metrics,listener=PLAINTEXT,networkProcessor=1:response-total=576.0
java.lang:type=OperatingSystem:ProcessCpuTime=42500000000
java.lang:type=OperatingSystem:Name=Linux
java.lang:type=OperatingSystem:SystemCpuLoad=0.25
kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Fetch:Count=100
kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Fetch:Mean=0.5
kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Fetch:99thPercentile=3.0
kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Metadata:Count=40
kafka.network:type=RequestMetrics,name=LocalTimeMs,request=Metadata:Mean=0.25
`
	w, err := parseJMX(out)
	if err != nil {
		t.Fatal(err)
	}
	want := brokerWork{topicBytes: 1300174, topicFetches: 1785, bytesOut: 1386344, requests: 1076, cpuNanos: 42500000000, localMicros: 60000}
	if w != want {
		t.Errorf("parseJMX = %+v, want %+v", w, want)
	}
	noCPU := strings.ReplaceAll(out, "ProcessCpuTime", "ProcessCpuLoad")
	if _, err := parseJMX(noCPU); err == nil {
		t.Error("parseJMX without ProcessCpuTime: no error")
	}
	noLocal := strings.ReplaceAll(out, "LocalTimeMs", "RemoteTimeMs")
	if _, err := parseJMX(noLocal); err == nil {
		t.Error("parseJMX without LocalTimeMs: no error")
	}
}

// TestParseStat: a backend's times and parent from its /proc stat line,
// whose command name may hold spaces and brackets.
func TestParseStat(t *testing.T) {
	line := "4242 (postgres: 15/main: postgres oxlb_a (x) idle) S 900 4242 4242 0 -1 4194560 1200 0 0 0 37 5 11 2 20 0 1 0 123456 250000000 3000 18446744073709551615\n"
	own, children, ppid, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if own != 42 || children != 13 || ppid != 900 {
		t.Errorf("parseStat = own %d, children %d, ppid %d; want 42, 13, 900", own, children, ppid)
	}
	for _, bad := range []string{"4242 postgres S 900", "4242 (postgres) S 900 1 2", "4242 (postgres) S 900 4242 4242 0 -1 4194560 1200 0 0 0 x 5 11 2"} {
		if _, _, _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

// TestProcTimesOfThisProcess: the bench's own process, read from /proc,
// has spent time and has the parent the runtime says.
func TestProcTimesOfThisProcess(t *testing.T) {
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	own, _, ppid, err := procTimes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if own <= 0 || ppid != os.Getppid() {
		t.Errorf("procTimes(self) = own %d ticks, ppid %d; want some time and ppid %d", own, ppid, os.Getppid())
	}
}
