package pg

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// Budgets bound the sessions the exporter holds on each PostgreSQL server
// (host and port), whatever database they are on: every pool opened with
// OpenShared, and any other session taken through AcquireSession, counts
// against its server's limit for as long as its socket is open. Fifty
// databases on one server with two pooled sessions each would otherwise
// hold a hundred of its slots while idle and lock the application out.
//
// A session that would exceed the limit waits, within its connect
// deadline, while the budget makes room: it closes an idle session of
// another database on the server at once, and one in use as soon as its
// holder returns it. Sessions are opened on demand and closed when others
// need the room, so each database costs nothing while it is not read.
type Budgets struct {
	mu      sync.Mutex
	limit   int
	servers map[string]*server
	// databases counts the configured databases on each server, leases
	// the lease sessions kept there apart from the pools (Plan).
	databases, leases map[string]int
}

// server is the budget of one host:port.
type server struct {
	name string
	b    *Budgets
	// open counts the sessions whose sockets are open; waiting, those
	// waiting for room. wake is closed (and replaced) when a session
	// closes.
	open, waiting int
	wake          chan struct{}
	pools         map[*pgxpool.Pool]bool
}

// idleRetry is how often a session waiting for room looks for an idle one
// to close, besides when a session closes.
const idleRetry = 20 * time.Millisecond

// NewBudgets returns budgets of limit sessions per server; 0 (a
// configuration built without Parse) means the default.
func NewBudgets(limit int) *Budgets {
	return &Budgets{limit: orDefaultLimit(limit), servers: map[string]*server{}, databases: map[string]int{}, leases: map[string]int{}}
}

// Plan counts the databases of each server, before their pools open: a
// pool then holds at most its share of the server's budget (and at least
// one session), so that a database does not open a second session while
// others wait for their first. leases are the databases on whose server
// a lease session (leader election) is held for as long as the replica
// runs: the room of each is taken from the pools' shares first. Were it
// not, the pools' shares and the lease would add up to more than the
// budget, and every time they all had work at once a pool would close
// an idle session of another database to open one of its own, which the
// other then opened again (each new session a new prepare and catalog
// reads for the server). A database whose DSN does not parse is left
// out (OpenShared refuses it).
func (b *Budgets) Plan(dbs map[string]*config.Database, leases ...*config.Database) {
	counts, held := map[string]int{}, map[string]int{}
	for _, db := range dbs {
		if key, err := ServerOf(db); err == nil {
			counts[key]++
		}
	}
	for _, db := range leases {
		if key, err := ServerOf(db); err == nil {
			held[key]++
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.databases, b.leases = counts, held
}

// poolSize is the sessions a pool of db on server key may hold: its
// max_connections, at most its share of the budget left by the server's
// lease sessions, at least one.
func (b *Budgets) poolSize(key string, maxConns int) int32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	share := b.limit - b.leases[key]
	if n := b.databases[key]; n > 1 {
		share /= n
	}
	return int32(max(1, min(maxConns, share)))
}

func orDefaultLimit(limit int) int {
	if limit < 1 {
		return config.DefaultSessionsPerServer
	}
	return limit
}

// SetLimit changes the limit of every server, for a reload. Sessions over a
// lower limit close as their holders return them.
func (b *Budgets) SetLimit(limit int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit = orDefaultLimit(limit)
	for _, s := range b.servers {
		s.wakeLocked()
	}
}

// Limit returns the sessions each server allows.
func (b *Budgets) Limit() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit
}

// Open returns how many sessions are open on the server of db.
func (b *Budgets) Open(db *config.Database) (int, error) {
	key, err := ServerOf(db)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.servers[key]; s != nil {
		return s.open, nil
	}
	return 0, nil
}

// ServerOf returns the host:port db's DSN connects to, the key its
// sessions are counted under.
func ServerOf(db *config.Database) (string, error) {
	cc, err := pgconn.ParseConfig(db.DSN.Reveal())
	if err != nil {
		return "", fmt.Errorf("parse dsn %s: invalid connection string", config.RedactDSN(db.DSN.Reveal()))
	}
	return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), nil
}

func (b *Budgets) server(key string) *server {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.servers[key]
	if s == nil {
		s = &server{name: key, b: b, wake: make(chan struct{}), pools: map[*pgxpool.Pool]bool{}}
		b.servers[key] = s
	}
	return s
}

// AcquireSession takes room for one session on the server of db and
// returns the function that gives it back (once; later calls do
// nothing). It is the one way a session of the exporter is counted: pools
// from OpenShared call it as they dial; a session opened apart from them
// (a leader-election lease) must call it too, and release when its
// socket closes. It waits within ctx while the server's limit is reached,
// closing an idle pooled session of the server to make room.
func (b *Budgets) AcquireSession(ctx context.Context, db *config.Database) (release func(), err error) {
	key, err := ServerOf(db)
	if err != nil {
		return nil, err
	}
	return b.server(key).acquire(ctx)
}

func (s *server) acquire(ctx context.Context) (func(), error) {
	for {
		s.b.mu.Lock()
		if s.open < s.b.limit {
			s.open++
			s.b.mu.Unlock()
			return sync.OnceFunc(s.release), nil
		}
		s.waiting++
		wake := s.wake
		pools := make([]*pgxpool.Pool, 0, len(s.pools))
		for p := range s.pools {
			pools = append(pools, p)
		}
		s.b.mu.Unlock()
		closeOneIdle(ctx, pools)
		var err error
		// A session may turn idle without a close to wake on (a pool
		// keeps a dial that outlived its caller): look again now and then.
		retry := time.NewTimer(idleRetry)
		select {
		case <-wake:
		case <-retry.C:
		case <-ctx.Done():
			err = fmt.Errorf("wait for one of the %d sessions the exporter may hold on %s (sessions_per_server): %w", s.b.Limit(), s.name, ctx.Err())
		}
		retry.Stop()
		s.b.mu.Lock()
		s.waiting--
		s.b.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

func (s *server) release() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.open--
	s.wakeLocked()
}

// wakeLocked wakes every waiter; b.mu is held.
func (s *server) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// crowded reports whether sessions wait for room on the server, or it
// holds more than its limit (lowered by a reload): a session returned
// to its pool then is closed instead of kept idle.
func (s *server) crowded() bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.waiting > 0 || s.open > s.b.limit
}

// closeOneIdle closes one idle pooled session of pools, if there is one.
func closeOneIdle(ctx context.Context, pools []*pgxpool.Pool) {
	for _, p := range pools {
		conns := p.AcquireAllIdle(ctx)
		if len(conns) == 0 {
			continue
		}
		closeConn(conns[0].Hijack())
		for _, c := range conns[1:] {
			c.Release()
		}
		return
	}
}

// closeConn closes a session, waiting at most a second for the server to
// hear its goodbye; the socket closes either way.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx)
}

// budgetedConn is a session's socket: closing it gives its room back.
type budgetedConn struct {
	net.Conn
	release func()
}

// Close gives the session's room back only once the server's backend has
// gone: a backend leaves its connection slot before its process exits
// and the kernel closes its end, so the end of the stream says the slot
// is free. Without waiting, the next session could arrive while the old
// backend still holds the slot, and an application at the server's
// limit be refused in that moment. The wait is bounded by a second.
func (c *budgetedConn) Close() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.Conn.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, c.Conn)
	}
	err := c.Conn.Close()
	c.release()
	return err
}

// countDials makes every session dialled with cc count against the
// budget of its server: a dial takes room first (AcquireSession's way),
// the socket's close gives it back. It returns the server's budget.
func (b *Budgets) countDials(cc *pgx.ConnConfig) *server {
	s := b.server(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		release, err := s.acquire(ctx)
		if err != nil {
			return nil, err
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			release()
			return nil, err
		}
		return &budgetedConn{Conn: c, release: release}, nil
	}
	return s
}

// share makes the pool config's sessions count against the budget of its
// server: a dial takes room first, the socket's close gives it back, and a
// session returned to the pool while the server is crowded is closed.
func (b *Budgets) share(pc *pgxpool.Config) (*server, func(*pgxpool.Pool)) {
	key := net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port)))
	pc.MaxConns = b.poolSize(key, int(pc.MaxConns))
	s := b.countDials(pc.ConnConfig)
	g := pc.ConnConfig.Tracer.(guard)
	g.acquiring = &atomic.Int64{}
	var pool atomic.Pointer[pgxpool.Pool]
	closes := func() bool {
		if !s.crowded() {
			return false
		}
		// Kept while another caller of the same database waits for the
		// pool to hand it a session (not for its own dial): it would
		// otherwise dial a new one at once.
		p := pool.Load()
		return p == nil || g.acquiring.Load() <= int64(p.Stat().ConstructingConns())
	}
	g.onRelease = func(c *pgx.Conn) {
		if closes() {
			closeConn(c)
		}
	}
	pc.ConnConfig.Tracer = g
	// A round asks it before its last transaction's end (rounds.go).
	after := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		c.PgConn().CustomData()[closesKey] = closes
		return nil
	}
	return s, pool.Store
}

// OpenShared is Open with the pool's sessions counted against the budget
// of its server. close closes the pool and forgets it.
func OpenShared(ctx context.Context, db *config.Database, b *Budgets) (pool *pgxpool.Pool, close func(), err error) {
	pc, err := PoolConfig(db)
	if err != nil {
		return nil, nil, err
	}
	s, setPool := b.share(pc)
	pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("open pool %s: %w", config.RedactDSN(db.DSN.Reveal()), err)
	}
	setPool(pool)
	b.mu.Lock()
	s.pools[pool] = true
	b.mu.Unlock()
	return pool, func() {
		b.mu.Lock()
		delete(s.pools, pool)
		b.mu.Unlock()
		pool.Close()
	}, nil
}
