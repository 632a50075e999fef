package kafkatest

import (
	"os"
	"sync"
	"testing"
)

// shared is the package's one broker, started by the first Shared.
var shared struct {
	mu   sync.Mutex
	opts Options
	b    *Broker
	err  error
	done bool
}

// Main runs the package's tests with the shared broker's options and
// stops the broker afterwards. Call it from TestMain.
func Main(m *testing.M, opts ...Options) {
	if len(opts) > 0 {
		shared.opts = opts[0]
	}
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// Shared returns the package's broker, starting it on first use. It fails
// the test (never skips) if Kafka cannot start; later callers get the
// same error without retrying.
func Shared(t testing.TB) *Broker {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.done {
		shared.done = true
		o := shared.opts
		if o.JVM == nil {
			o.JVM = QuickJVM
		}
		shared.b, shared.err = Start(o)
	}
	if shared.err != nil {
		t.Fatalf("real Kafka broker: %v", shared.err)
	}
	select {
	case <-shared.b.done:
		t.Fatalf("real Kafka broker: the shared JVM exited (%v); last output:\n%s", shared.b.waitErr, shared.b.Output())
	default:
	}
	return shared.b
}

// StopShared stops the shared broker if one was started.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.b != nil {
		shared.b.Stop()
		shared.b = nil
	}
}
