package collectors

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func metricValue(t *testing.T, m prometheus.Metric) float64 {
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

func labelOf(t *testing.T, m prometheus.Metric, name string) string {
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
