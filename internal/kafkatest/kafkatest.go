// Package kafkatest starts an in-process franz-go kfake cluster that
// listens on loopback TCP, so tests talk to it through real kgo clients.
package kafkatest

import (
	"net"
	"strconv"
	"testing"

	"github.com/outbox-exporter/outbox_exporter/internal/netutil"
	"github.com/twmb/franz-go/pkg/kfake"
)

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("kafkatest: free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// Cluster is a kfake cluster and its broker addresses.
type Cluster struct {
	*kfake.Cluster
	Ports []int
}

// Brokers returns the host:port seed list.
func (c *Cluster) Brokers() []string {
	out := make([]string, len(c.Ports))
	for i, p := range c.Ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

// New starts a kfake cluster with brokers brokers on loopback and closes it
// when the test ends. More kfake options may be passed.
func New(t testing.TB, brokers int, opts ...kfake.Opt) *Cluster {
	t.Helper()
	ports := FreePorts(t, brokers)
	all := append([]kfake.Opt{kfake.Ports(ports...), kfake.ListenFn(netutil.LoopbackListen)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Cluster{Cluster: c, Ports: ports}
}

// Real reports that this is kfake, not Apache Kafka.
func (c *Cluster) Real() bool { return false }

// Env is a Kafka a test talks to: a kfake Cluster or a real Broker. Test
// tables run each case against both where the two can answer differently.
type Env interface {
	Brokers() []string
	Real() bool
}
