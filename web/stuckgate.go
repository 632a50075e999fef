package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/outbox-exporter/outbox_exporter/app"
)

// maxStuckLimit caps /api/v1/stuck's limit: enough rows to act on, few
// enough that anyone who reaches the port cannot make one request cost
// much.
const maxStuckLimit = 100

// stuckGate bounds the stuck-row queries HTTP requests run against the
// pools the scrapes use: one at a time per outbox, and per database at
// most max_connections-1 (at least one), so that a storm of page and API
// requests leaves a session for the scrapes.
type stuckGate struct {
	mu      sync.Mutex
	outboxs map[string]chan struct{}
	dbs     map[string]chan struct{}
}

func (g *stuckGate) sem(m *map[string]chan struct{}, key string, n int) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if *m == nil {
		*m = map[string]chan struct{}{}
	}
	// The size is in the key: a reload that changes max_connections gets a
	// gate of the new size; requests under the old one finish as they were.
	key = fmt.Sprintf("%s/%d", key, n)
	c, ok := (*m)[key]
	if !ok {
		c = make(chan struct{}, n)
		(*m)[key] = c
	}
	return c
}

// acquire takes the outbox's and its database's slots. With wait it waits
// for them until ctx ends; without, it gives up at once. It returns the
// release function, or nil if the slots were not free.
func (g *stuckGate) acquire(ctx context.Context, a *app.App, outbox string, wait bool) func() {
	o, ok := a.Config.Outboxes[outbox]
	if !ok {
		return func() {} // app.Stuck answers ErrUnknownOutbox
	}
	n := 1
	if db := a.Config.Databases[o.Database]; db != nil && db.MaxConnections > 2 {
		n = db.MaxConnections - 1
	}
	first := g.sem(&g.outboxs, outbox, 1)
	second := g.sem(&g.dbs, o.Database, n)
	take := func(c chan struct{}) bool {
		if wait {
			select {
			case c <- struct{}{}:
				return true
			case <-ctx.Done():
				return false
			}
		}
		select {
		case c <- struct{}{}:
			return true
		default:
			return false
		}
	}
	if !take(first) {
		return nil
	}
	if !take(second) {
		<-first
		return nil
	}
	return func() { <-second; <-first }
}

// errorID names one failed request in the log, so that its answer can
// point there without quoting a database error (which may quote row data).
func errorID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
