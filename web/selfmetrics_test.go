package web

import (
	"regexp"
	"strings"
	"testing"
)

// TestMetricHandlerCountsItsScrapes: /metrics carries the handler's own
// metrics as node_exporter does, and they count across scrapes (each
// scrape gathers a registry of its own). A second Handler() shares them.
func TestMetricHandlerCountsItsScrapes(t *testing.T) {
	s, _ := newTestServer(t, goodConfig)
	get(t, s.Handler(), "GET", "/metrics")
	get(t, s.Handler(), "GET", "/metrics")
	_, body := get(t, s.Handler(), "GET", "/metrics")
	for _, want := range []string{
		// The third scrape sees the two before it: a request is counted
		// when its answer has been written.
		`promhttp_metric_handler_requests_total{code="200"} 2`,
		`promhttp_metric_handler_requests_total{code="500"} 0`,
		`promhttp_metric_handler_requests_total{code="503"} 0`,
		`promhttp_metric_handler_requests_in_flight 1`,
		`promhttp_metric_handler_errors_total{cause="encoding"} 0`,
		`promhttp_metric_handler_errors_total{cause="gathering"} 0`,
	} {
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, strings.Join(regexp.MustCompile(`(?m)^promhttp_.*$`).FindAllString(body, -1), "\n"))
		}
	}
}
