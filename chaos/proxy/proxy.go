// Package proxy is a small fault-injecting TCP proxy for the chaos suite: one
// Proxy per directed link (a listener on loopback forwarding every accepted
// connection to an upstream address), whose Mode can be switched at any time:
//
//   - Pass: bytes flow both ways (optionally each chunk held back by Delay).
//   - Blackhole: the link is cut silently: open connections stay open but every
//     byte is dropped in both directions, and new connections are accepted and
//     held without dialing upstream. Nothing is refused, so peers only notice
//     through their own timeouts (the worst case for failure detection).
//   - Reset: every open connection is closed with a TCP reset, and new
//     connections are accepted and reset at once.
//
// Leaving Blackhole closes every connection that lost bytes (their streams are
// corrupt), so clients reconnect; connections are never resumed mid-stream.
//
// With several upstreams (the nodes of one region) the proxy is also the
// region's TCP load balancer: each new connection goes to the next upstream
// in turn, and one that refuses the dial is skipped for the next, so a dead
// node costs its open connections and nothing after.
//
// The proxy has no randomness and no timers of its own besides Delay, so a
// schedule of SetMode calls is deterministic. Close stops the listener, closes
// every connection and waits for every goroutine.
package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Kind is what a link does with traffic.
type Kind int

// Link kinds.
const (
	Pass Kind = iota
	Blackhole
	Reset
)

func (k Kind) String() string {
	switch k {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Mode is a link's behaviour. Delay applies in Pass mode only: each chunk is
// forwarded Delay after it was read (order is kept).
type Mode struct {
	Kind  Kind
	Delay time.Duration
}

func (m Mode) String() string {
	if m.Kind == Pass && m.Delay > 0 {
		return "delay " + m.Delay.String()
	}
	return m.Kind.String()
}

// Stats counts what a proxy did.
type Stats struct {
	Accepted  uint64 // connections accepted
	Resets    uint64 // connections reset (Reset mode, or closed on leaving Blackhole)
	Held      uint64 // connections accepted while blackholed
	BytesUp   uint64 // bytes forwarded client → upstream
	BytesDown uint64 // bytes forwarded upstream → client
	Dropped   uint64 // bytes dropped while blackholed
	DialFails uint64 // upstream dials that failed (the client connection is closed)
	// Forwarded counts the connections forwarded to each upstream, in the
	// order New was given them.
	Forwarded []uint64
}

// Proxy is one directed link.
type Proxy struct {
	name      string
	upstreams []string
	ln        net.Listener

	mu     sync.Mutex
	mode   Mode
	conns  map[*link]struct{}
	stats  Stats
	closed bool
	next   int // the upstream the next connection tries first

	wg sync.WaitGroup
}

// link is one proxied connection: the client side and, unless it was accepted
// while blackholed, the upstream side.
type link struct {
	client   net.Conn
	upstream net.Conn // nil for a held connection
	dirty    bool     // lost bytes: close on leaving Blackhole
	once     sync.Once
}

func (l *link) close(reset bool) {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.upstream} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && reset {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// New starts a proxy listening on listen (e.g. "127.0.0.1:0") that forwards to
// upstream, or to each of several in turn. name labels it in errors and reports.
func New(name, listen string, upstream string, more ...string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	ups := append([]string{upstream}, more...)
	p := &Proxy{name: name, upstreams: ups, ln: ln, conns: map[*link]struct{}{}, stats: Stats{Forwarded: make([]uint64, len(ups))}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Name is the proxy's label.
func (p *Proxy) Name() string { return p.name }

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstreams are the addresses the proxy forwards to.
func (p *Proxy) Upstreams() []string { return append([]string(nil), p.upstreams...) }

// Mode is the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Stats is a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Forwarded = append([]uint64(nil), st.Forwarded...)
	return st
}

// SetMode switches the link's behaviour, effective at once for every open
// connection.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	old := p.mode
	p.mode = m
	var toClose []*link
	for l := range p.conns {
		switch {
		case m.Kind == Reset:
			toClose = append(toClose, l)
		case m.Kind == Blackhole:
			l.dirty = true
		case old.Kind == Blackhole && (l.dirty || l.upstream == nil):
			toClose = append(toClose, l)
		}
	}
	for _, l := range toClose {
		delete(p.conns, l)
		p.stats.Resets++
	}
	p.mu.Unlock()
	for _, l := range toClose {
		l.close(true)
	}
}

// Close stops the proxy and waits for its goroutines. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	var all []*link
	for l := range p.conns {
		all = append(all, l)
		delete(p.conns, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range all {
		l.close(true)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.stats.Accepted++
		m := p.mode
		switch m.Kind {
		case Reset:
			p.stats.Resets++
			p.mu.Unlock()
			(&link{client: c}).close(true)
			continue
		case Blackhole:
			p.stats.Held++
			l := &link{client: c, dirty: true}
			p.conns[l] = struct{}{}
			p.wg.Add(1)
			p.mu.Unlock()
			go p.hold(l)
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// hold reads and drops a held connection's bytes until it is closed.
func (p *Proxy) hold(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		p.mu.Lock()
		p.stats.Dropped += uint64(n)
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	l.close(false)
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	up, err := p.dial()
	if err != nil {
		(&link{client: c}).close(true)
		return
	}
	l := &link{client: c, upstream: up}
	p.mu.Lock()
	if p.closed || p.mode.Kind == Reset {
		p.mu.Unlock()
		l.close(true)
		return
	}
	if p.mode.Kind == Blackhole {
		l.dirty = true
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	defer p.forget(l)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, c, up, true) }()
	go func() { defer wg.Done(); p.pipe(l, up, c, false) }()
	wg.Wait()
}

// dial connects to the next upstream in turn, skipping those that refuse;
// each failed dial is counted.
func (p *Proxy) dial() (net.Conn, error) {
	p.mu.Lock()
	first := p.next
	p.next = (p.next + 1) % len(p.upstreams)
	p.mu.Unlock()
	var err error
	for i := range p.upstreams {
		k := (first + i) % len(p.upstreams)
		up, derr := net.DialTimeout("tcp", p.upstreams[k], 2*time.Second)
		p.mu.Lock()
		if derr == nil {
			p.stats.Forwarded[k]++
		} else {
			p.stats.DialFails++
		}
		p.mu.Unlock()
		if derr == nil {
			return up, nil
		}
		err = derr
	}
	return nil, err
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst applying the mode to every chunk; when either side
// fails the whole link is closed.
func (p *Proxy) pipe(l *link, src, dst net.Conn, up bool) {
	defer l.close(false)
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			if d := time.Until(ch.due); d > 0 {
				t := time.NewTimer(d)
				<-t.C
			}
			if _, err := dst.Write(ch.b); err != nil {
				l.close(false)
				for range q { // drain so the reader never blocks
				}
				return
			}
			p.mu.Lock()
			if up {
				p.stats.BytesUp += uint64(len(ch.b))
			} else {
				p.stats.BytesDown += uint64(len(ch.b))
			}
			p.mu.Unlock()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			m, dirty := p.mode, l.dirty
			if m.Kind != Pass || dirty {
				p.stats.Dropped += uint64(n)
			}
			p.mu.Unlock()
			if m.Kind == Pass && !dirty {
				b := append([]byte(nil), buf[:n]...)
				q <- chunk{b: b, due: time.Now().Add(m.Delay)}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close(false)
			}
			break
		}
	}
	close(q)
	<-done
	// Half-close is not modelled: the end of one direction ends the link.
}
