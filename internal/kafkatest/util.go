package kafkatest

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"sync"
)

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clusterID is a random KRaft cluster id (16 bytes, URL-safe base64).
func clusterID() string {
	for {
		var u [16]byte
		_, _ = rand.Read(u[:])
		// One id in 64 would start with '-', which kafka-storage's
		// argument parser takes for an option: format then fails.
		if id := base64.RawURLEncoding.EncodeToString(u[:]); id[0] != '-' {
			return id
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append([]byte(nil), w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
