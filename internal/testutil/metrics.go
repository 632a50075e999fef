package testutil

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Quiet is a logger that discards everything.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// MetricValue is the value of a gauge or counter; it fails the test for
// any other kind.
func MetricValue(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	switch {
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	}
	t.Fatalf("metric %v is neither gauge nor counter", m.Desc())
	return 0
}

// LabelOf is the value of m's label name, "" when it has none.
func LabelOf(t testing.TB, m prometheus.Metric, name string) string {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	for _, l := range pb.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// IsMetric reports whether m's descriptor has the fully qualified name.
func IsMetric(m prometheus.Metric, name string) bool {
	return strings.Contains(m.Desc().String(), "fqName: "+strconv.Quote(name))
}
