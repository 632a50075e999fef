package kafka

import (
	"regexp"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-exporter/outbox_exporter/internal/kafkatest"
)

// The real broker is started once for the package (on first use) and
// stopped at the end; tests on it use distinct topics and groups.
func TestMain(m *testing.M) { kafkatest.Main(m) }

// kenv is one Kafka a test case runs on: a fresh kfake cluster, or the
// package's Apache Kafka broker with every topic and group name prefixed
// so that cases sharing it do not see each other.
type kenv struct {
	kafkatest.Env
	ns string
	// kc is the kfake cluster (nil on the real broker), for the cases
	// that steer it.
	kc *kafkatest.Cluster
}

// n is a topic or group name in this environment.
func (e kenv) n(name string) string { return e.ns + name }

// pat is a group or topic pattern in this environment: a /regex/ is
// anchored after the prefix, a plain name is prefixed.
func (e kenv) pat(p string) string {
	if len(p) > 1 && p[0] == '/' && p[len(p)-1] == '/' {
		return "/" + regexp.QuoteMeta(e.ns) + p[1:]
	}
	return e.ns + p
}

// onBoth runs fn as subtest "kfake" (a cluster of kfakeBrokers) and
// "kafka" (Apache Kafka): the same case, checked against both, for every
// case where they can answer differently.
func onBoth(t *testing.T, kfakeBrokers int, fn func(t *testing.T, e kenv), opts ...kfake.Opt) {
	t.Run("kfake", func(t *testing.T) {
		kc := kafkatest.New(t, kfakeBrokers, opts...)
		fn(t, kenv{Env: kc, kc: kc})
	})
	t.Run("kafka", func(t *testing.T) { fn(t, realEnv(t)) })
}

// realEnv is the shared Apache Kafka broker with a fresh name prefix.
func realEnv(t *testing.T) kenv {
	b := kafkatest.Shared(t)
	return kenv{Env: b, ns: kafkatest.Name(t) + "."}
}
