package web

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// selfCollectors keeps the collectors promhttp registers for the metrics
// handler itself (promhttp_metric_handler_requests_total,
// _requests_in_flight and _errors_total, as node_exporter exposes them)
// across scrapes: each scrape gathers a registry of its own, which would
// start those counters from zero every time. Registering a collector again
// answers with the one kept, as a prometheus.Registry does.
type selfCollectors struct {
	mu   sync.Mutex
	byID map[string]prometheus.Collector
	cs   []prometheus.Collector
}

// Register implements prometheus.Registerer.
func (r *selfCollectors) Register(c prometheus.Collector) error {
	id := describeID(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byID[id]; ok {
		return prometheus.AlreadyRegisteredError{ExistingCollector: old, NewCollector: c}
	}
	if r.byID == nil {
		r.byID = map[string]prometheus.Collector{}
	}
	r.byID[id] = c
	r.cs = append(r.cs, c)
	return nil
}

// MustRegister implements prometheus.Registerer.
func (r *selfCollectors) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer; the handler's own
// collectors stay for the life of the Server.
func (r *selfCollectors) Unregister(prometheus.Collector) bool { return false }

// collectors returns the collectors registered so far.
func (r *selfCollectors) collectors() []prometheus.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]prometheus.Collector(nil), r.cs...)
}

// describeID names a collector by the descriptors it describes.
func describeID(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 8)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var sb strings.Builder
	for d := range ch {
		sb.WriteString(d.String())
	}
	return sb.String()
}
