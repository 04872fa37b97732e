package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/region"
)

var quiet = slog.New(slog.DiscardHandler)

// TestRunRefusesWeakOrMissingSecret: `likesd run` does not start without a
// signing secret of at least 32 bytes or a verification key, unless
// --insecure-dev-secret; dev falls back to the development secret.
func TestRunRefusesWeakOrMissingSecret(t *testing.T) {
	t.Setenv(auth.EnvSecret, "")
	for _, tc := range []struct {
		secret string
		want   string
	}{
		{"", "no token verification configured"},
		{"short", "needs at least 32"},
		{strings.Repeat("x", auth.MinSecretLen-1), "needs at least 32"},
	} {
		t.Setenv(auth.EnvSecret, tc.secret)
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"run", "--region", "us", "--data", t.TempDir(), "--http", "127.0.0.1:0"}, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errSecurity) {
			t.Errorf("secret %q: %v, want an error mentioning %q", tc.secret, err, tc.want)
		}
	}

	dir := t.TempDir()
	pub := filepath.Join(dir, "pub.pem")
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, pubPEM, err := auth.MarshalPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pubPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		p          publicFlags
		secret     string
		dev        bool
		wantErr    string
		wantSecret bool
		wantKeys   int
	}{
		{name: "no secret", wantErr: "no token verification"},
		{name: "short", secret: "abc", wantErr: "at least 32"},
		{name: "long", secret: strings.Repeat("s", 32), wantSecret: true},
		{name: "public key only", p: publicFlags{publicKey: pub}, wantKeys: 1},
		{name: "public key and secret", p: publicFlags{publicKey: pub}, secret: strings.Repeat("s", 40), wantSecret: true, wantKeys: 1},
		{name: "public key, short secret", p: publicFlags{publicKey: pub}, secret: "abc", wantErr: "at least 32"},
		{name: "insecure flag", p: publicFlags{insecureDevSecret: true}, wantSecret: true},
		{name: "insecure flag, short", p: publicFlags{insecureDevSecret: true}, secret: "abc", wantSecret: true},
		{name: "dev", dev: true, wantSecret: true},
		{name: "missing key file", p: publicFlags{publicKey: filepath.Join(dir, "nope.pem")}, wantErr: "--auth-public-key"},
		{name: "key file not a key", p: publicFlags{jwks: pub}, wantErr: "--auth-jwks"},
		{name: "negative ttl", p: publicFlags{maxTokenTTL: -time.Second}, secret: strings.Repeat("s", 32), wantErr: "negative"},
	} {
		v, err := tc.p.authConfig(tc.secret, tc.dev, quiet)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case (len(v.secret) > 0) != tc.wantSecret || len(v.auth.PublicKeys) != tc.wantKeys:
			t.Errorf("%s: secret %v, %d keys; want secret %v, %d keys", tc.name, len(v.secret) > 0, len(v.auth.PublicKeys), tc.wantSecret, tc.wantKeys)
		}
	}
}

func TestHTTPFlagsValidated(t *testing.T) {
	ok := publicFlags{readTimeout: time.Second, writeTimeout: time.Second, idleTimeout: time.Second, maxConns: 1}
	for name, mod := range map[string]func(*publicFlags){
		"read 0":      func(p *publicFlags) { p.readTimeout = 0 },
		"write < 0":   func(p *publicFlags) { p.writeTimeout = -1 },
		"conns 0":     func(p *publicFlags) { p.maxConns = 0 },
		"cert no key": func(p *publicFlags) { p.tlsCert = "c.pem" },
		"bad files":   func(p *publicFlags) { p.tlsCert, p.tlsKey = "c.pem", "k.pem" },
	} {
		p := ok
		mod(&p)
		if _, err := p.httpConfig(); !errors.Is(err, errSecurity) {
			t.Errorf("%s: %v", name, err)
		}
	}
	hs, err := ok.httpConfig()
	if err != nil || hs.tls != nil || hs.header > hs.read {
		t.Fatalf("%+v %v", hs, err)
	}
}

// serveTest runs a standalone region behind the public server settings of p.
func serveTest(t *testing.T, p publicFlags) *served {
	t.Helper()
	hs, err := p.httpConfig()
	if err != nil {
		t.Fatal(err)
	}
	r, err := region.Open(context.Background(), region.Config{
		Name: "us", DataDir: t.TempDir(), Partitions: 2, Secret: []byte(strings.Repeat("s", 32)), Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := serveHTTP(r, ln, hs)
	t.Cleanup(func() {
		_ = s.srv.Close()
		_ = r.Close()
	})
	return s
}

func testFlags() publicFlags {
	return publicFlags{readTimeout: 500 * time.Millisecond, writeTimeout: 5 * time.Second, idleTimeout: time.Minute, maxConns: 64}
}

// TestHugeHeaderIs431: a 1 MiB header block is refused with 431.
func TestHugeHeaderIs431(t *testing.T) {
	s := serveTest(t, testFlags())
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		fmt.Fprintf(conn, "GET /v1/items/i/count HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", strings.Repeat("a", 1<<20))
	}()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", res.StatusCode)
	}
}

// TestTrickledBodyDropped: a client sending its body a byte at a time is
// disconnected once the read timeout has passed (polled with a generous
// deadline: nothing is measured).
func TestTrickledBodyDropped(t *testing.T) {
	s := serveTest(t, testFlags())
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/likes:batchGet HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte per tick, bounded; stops at the first failed write
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range 900 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, conn) // whatever the server answers, it must then close
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a trickling client's connection open")
	}
}

// TestConnectionCap: the listener holds at most n connections; one more is
// accepted once one closes.
func TestConnectionCap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 1)
	defer l.Close()
	c1, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	a1, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if len(l.sem) != cap(l.sem) {
		t.Fatalf("%d of %d slots taken after one accept", len(l.sem), cap(l.sem))
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c2, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted over the cap of 1")
	default:
	}
	_ = a1.Close()
	_ = a1.Close() // idempotent: releases one slot only
	select {
	case c, ok := <-accepted:
		if !ok {
			t.Fatal("accept failed")
		}
		_ = c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the second connection was never accepted after the first closed")
	}
}

// TestHTTPSListener: with --http-tls-cert/--http-tls-key the public port
// speaks TLS only.
func TestHTTPSListener(t *testing.T) {
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	p := testFlags()
	p.tlsCert, p.tlsKey = cert, key
	s := serveTest(t, p)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("url %s", s.url)
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := cl.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("readyz over TLS: %d", res.StatusCode)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if res, err := plain.Get("http://" + strings.TrimPrefix(s.url, "https://") + "/readyz"); err == nil {
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the TLS port")
		}
	}
}

func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "likes test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(k)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool
}
