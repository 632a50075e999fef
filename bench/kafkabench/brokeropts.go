package main

// Knobs for the Apache Kafka node the bench starts: server.properties
// lines (-broker-set key=value, repeatable) and a log4j2 file of one's own
// (-broker-log4j), so that the same run can be measured on the broker's
// defaults and on settings a user could change, and the broker's request
// log read where its time goes.

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// kvFlag collects key=value flags.
type kvFlag map[string]string

func (f kvFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+f[k])
	}
	return strings.Join(parts, ",")
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want key=value, got a value without '=' or with an empty key")
	}
	f[strings.TrimSpace(k)] = strings.TrimSpace(v)
	return nil
}

var (
	brokerSet   = kvFlag{}
	brokerLog4j string
)

func init() {
	flag.Var(brokerSet, "broker-set", "with -broker kafka: a server.properties line key=value for the Apache Kafka node (repeatable); the run's header names them")
	flag.StringVar(&brokerLog4j, "broker-log4j", "", "with -broker kafka: the node's log4j2 configuration file (default: errors only)")
}

// kafkaOptions are the options of the Apache Kafka node the bench starts.
func kafkaOptions() (kafkatest.Options, error) {
	o := kafkatest.Options{Heap: "1g", OffsetsPartitions: 50}
	if brokerLog4j != "" {
		b, err := os.ReadFile(brokerLog4j)
		if err != nil {
			return o, fmt.Errorf("-broker-log4j: %w", err)
		}
		o.Log4j = string(b)
	}
	if len(brokerSet) > 0 {
		o.Extra = map[string]string{}
		for k, v := range brokerSet {
			o.Extra[k] = v
		}
	}
	return o, nil
}

// brokerSettings names the settings changed from the broker's defaults.
func brokerSettings() string {
	if len(brokerSet) == 0 {
		return "broker defaults"
	}
	return "broker set " + brokerSet.String()
}

// scrapeTimeout is the exporter's scrape timeout in -scrape (-scrape-timeout).
var scrapeTimeout time.Duration

func init() {
	flag.DurationVar(&scrapeTimeout, "scrape-timeout", time.Minute, "with -scrape: the exporter's scrape timeout (a one-minute scrape interval leaves it a minute)")
}
