package peertls_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/likes-dev/likes/internal/peertls"
)

func mustCA(t *testing.T) (cert, key []byte) {
	t.Helper()
	c, k, err := peertls.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

func mustID(t *testing.T, caCert, caKey []byte, region string) *peertls.Identity {
	t.Helper()
	c, k, err := peertls.Issue(caCert, caKey, region, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peertls.New(c, k, caCert)
	if err != nil {
		t.Fatal(err)
	}
	if id.Region != region {
		t.Fatalf("identity region %q, want %q", id.Region, region)
	}
	return id
}

// handshake runs a TLS server with srv on loopback and dials it with cli
// (nil: plaintext bytes). It returns the server's and the client's errors.
func handshake(t *testing.T, srv *tls.Config, cli *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(c, srv)
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Write([]byte{1}) // proves the handshake to the client
		}
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if cli == nil {
		_, _ = c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		buf := make([]byte, 64)
		_, clientErr = c.Read(buf)
	} else {
		tc := tls.Client(c, cli)
		clientErr = tc.Handshake()
		if clientErr == nil {
			// TLS 1.3: the server checks the client certificate after the
			// client's handshake returns; a read surfaces its verdict.
			_, clientErr = tc.Read(make([]byte, 1))
		}
	}
	return <-done, clientErr
}

func TestMutualTLS(t *testing.T) {
	caC, caK := mustCA(t)
	us, eu := mustID(t, caC, caK, "us"), mustID(t, caC, caK, "eu")
	otherC, otherK := mustCA(t)
	stranger := mustID(t, otherC, otherK, "us") // the right name, another CA

	if s, c := handshake(t, eu.ServerConfig(), us.ClientConfig("eu")); s != nil || c != nil {
		t.Fatalf("us → eu: server %v, client %v; want a handshake", s, c)
	}
	if _, c := handshake(t, eu.ServerConfig(), us.ClientConfig("ap")); !errors.Is(c, peertls.ErrWrongRegion) {
		t.Fatalf("us dialing ap but reaching eu: client %v, want ErrWrongRegion", c)
	}
	if s, _ := handshake(t, eu.ServerConfig(), stranger.ClientConfig("eu")); s == nil {
		t.Fatal("a certificate of another CA was accepted by the server")
	}
	if _, c := handshake(t, stranger.ServerConfig(), us.ClientConfig("us")); c == nil {
		t.Fatal("a server with a certificate of another CA was accepted by the client")
	}
	noCert := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if s, _ := handshake(t, eu.ServerConfig(), noCert); s == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	if s, _ := handshake(t, eu.ServerConfig(), nil); s == nil {
		t.Fatal("a plaintext client was accepted")
	}
}

func TestLoadChecksFiles(t *testing.T) {
	dir := t.TempDir()
	ids, err := peertls.EnsureDev(dir, []string{"us", "eu"})
	if err != nil || ids["us"].Region != "us" || ids["eu"].Region != "eu" {
		t.Fatalf("EnsureDev = %v, %v", ids, err)
	}
	// A second start reuses the files.
	again, err := peertls.EnsureDev(dir, []string{"us", "eu"})
	if err != nil || again["us"].NotAfter() != ids["us"].NotAfter() {
		t.Fatalf("EnsureDev again = %v, %v; want the same certificates", again, err)
	}
	for _, f := range []string{"ca.key", "us.key", "eu.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v; want mode 0600", f, fi.Mode(), err)
		}
	}
	cert, key := peertls.Files(dir, "us")
	ca, _ := peertls.Files(dir, "ca")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := peertls.Load(cert, key, ca); !errors.Is(err, peertls.ErrBadFiles) {
		t.Fatalf("Load with a world-readable key = %v, want ErrBadFiles", err)
	}
	_ = os.Chmod(key, 0o600)
	otherC, _ := mustCA(t)
	otherCA := filepath.Join(dir, "other.crt")
	if err := os.WriteFile(otherCA, otherC, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := peertls.Load(cert, key, otherCA); !errors.Is(err, peertls.ErrBadFiles) {
		t.Fatalf("Load against another CA = %v, want ErrBadFiles", err)
	}
	caC, caK := mustCA(t)
	if _, _, err := peertls.Issue(caC, caK, "bad/name", nil, time.Hour); err == nil {
		t.Fatal("Issue accepted a region name with a slash")
	}
}
