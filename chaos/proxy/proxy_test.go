package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New("test", "127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip sends a line and reads it back within d.
func roundTrip(c net.Conn, d time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(d))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("garbled: " + line)
	}
	return time.Since(start), nil
}

func TestPass(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// Counters are updated after each write: poll briefly.
	deadline := time.Now().Add(2 * time.Second)
	for {
		s := p.Stats()
		if s.Accepted == 1 && s.BytesUp == 5 && s.BytesDown == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDelay(t *testing.T) {
	p := newProxy(t)
	p.SetMode(Mode{Kind: Pass, Delay: 100 * time.Millisecond})
	c := dial(t, p)
	d, err := roundTrip(c, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d < 200*time.Millisecond { // delayed each way
		t.Fatalf("round trip %v, want >= 200ms", d)
	}
}

func TestBlackholeThenHeal(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Mode{Kind: Blackhole})
	if _, err := roundTrip(c, 200*time.Millisecond); err == nil {
		t.Fatal("bytes passed a blackholed link")
	}
	held := dial(t, p) // accepted and held: no error, no answer
	if _, err := roundTrip(held, 200*time.Millisecond); err == nil {
		t.Fatal("a new connection passed a blackholed link")
	}
	p.SetMode(Mode{Kind: Pass})
	// Both connections lost bytes: they are closed, never resumed.
	for _, cc := range []net.Conn{c, held} {
		_ = cc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := cc.Read(make([]byte, 16)); err == nil || isTimeout(err) {
			t.Fatalf("dirty connection not closed on heal: %v", err)
		}
	}
	if _, err := roundTrip(dial(t, p), 2*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

func TestReset(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Mode{Kind: Reset})
	if _, err := roundTrip(c, 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("open connection survived a reset: %v", err)
	}
	// A new connection is reset at once: by the dial itself or on first use.
	if nc, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_, err = roundTrip(nc, 2*time.Second)
		_ = nc.Close()
		if err == nil || isTimeout(err) {
			t.Fatalf("new connection passed a reset link: %v", err)
		}
	}
	p.SetMode(Mode{Kind: Pass})
	if _, err := roundTrip(dial(t, p), 2*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}

func TestCloseWaits(t *testing.T) {
	p, err := New("test", "127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	if _, err := roundTrip(c, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Mode{Kind: Blackhole})
	_ = dial(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// greeter starts a server that writes its name and closes each connection;
// stop closes its listener (the address then refuses dials).
func greeter(t *testing.T, name string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var once sync.Once
	stop = func() { once.Do(func() { _ = ln.Close(); wg.Wait() }) }
	t.Cleanup(stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name + "\n"))
			_ = c.Close()
		}
	}()
	return ln.Addr().String(), stop
}

func greeting(t *testing.T, p *Proxy) string {
	t.Helper()
	c := dial(t, p)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return line[:len(line)-1]
}

// TestUpstreamsInTurn: with several upstreams, new connections go to each in
// turn; one that refuses dials is skipped (counted), so every connection
// still reaches a live one.
func TestUpstreamsInTurn(t *testing.T) {
	a, _ := greeter(t, "a")
	b, stopB := greeter(t, "b")
	p, err := New("lb", "127.0.0.1:0", a, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var got []string
	for range 4 {
		got = append(got, greeting(t, p))
	}
	if want := []string{"a", "b", "a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("greetings %v, want %v", got, want)
	}
	stopB()
	got = got[:0]
	for range 4 {
		got = append(got, greeting(t, p))
	}
	if want := []string{"a", "a", "a", "a"}; !slices.Equal(got, want) {
		t.Fatalf("with b down: greetings %v, want %v", got, want)
	}
	if s := p.Stats(); s.DialFails != 2 || !slices.Equal(s.Forwarded, []uint64{6, 2}) {
		t.Fatalf("dial fails %d, forwarded %v; want 2 (every other connection tried b first) and [6 2]", s.DialFails, s.Forwarded)
	}
}
