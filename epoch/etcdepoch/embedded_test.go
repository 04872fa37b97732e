package etcdepoch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/likes-dev/likes/epoch/epochtest"
	"github.com/likes-dev/likes/epoch/etcdembed"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

func TestEmbeddedServesAndClosesIdempotently(t *testing.T) {
	e := epochtest.StartEmbedded(t)
	cli, err := etcdepoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e.Close()
	if _, open := <-e.Err(); open {
		t.Fatal("Err channel not closed after Close")
	}
}

func TestEmbeddedConfigValidated(t *testing.T) {
	if _, err := etcdembed.StartEmbedded(etcdembed.EmbeddedConfig{Dir: t.TempDir()}); err == nil {
		t.Fatal("StartEmbedded without addresses succeeded")
	}
}

// TestClientTLSAndAuth: an etcd with mutual TLS and auth is reached only with
// the CA, a client certificate and the right credentials; the client's
// configuration mistakes are named before dialing.
func TestClientTLSAndAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	s := epochtest.StartSecureEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cli, err := etcdepoch.NewClientWith(s.Client())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("put with credentials: %v", err)
	}

	wrong := s.Client()
	wrong.Password = "not-the-password"
	wrong.DialTimeout = 3 * time.Second
	if c, err := etcdepoch.NewClientWith(wrong); err == nil {
		_ = c.Close()
		t.Fatal("wrong password accepted")
	}

	anon := s.Client()
	anon.Username, anon.Password = "", ""
	if c, err := etcdepoch.NewClientWith(anon); err != nil {
		t.Fatal(err)
	} else {
		_, perr := c.Put(ctx, "/k", "anon")
		_ = c.Close()
		if perr == nil {
			t.Fatal("anonymous put accepted on an etcd with auth")
		}
	}

	noCert := s.Client()
	noCert.Cert, noCert.Key = "", ""
	noCert.DialTimeout = 3 * time.Second
	if c, err := etcdepoch.NewClientWith(noCert); err == nil {
		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, perr := c.Put(short, "/k", "nocert")
		cancel()
		_ = c.Close()
		if perr == nil {
			t.Fatal("a client without a certificate was served")
		}
	}

	for name, c := range map[string]etcdepoch.ClientConfig{
		"no endpoints":  {},
		"http with TLS": {Endpoints: []string{"http://127.0.0.1:1"}, CACert: s.CA},
		"cert no key":   {Endpoints: []string{"https://127.0.0.1:1"}, Cert: s.Cert},
		"password only": {Endpoints: []string{"http://127.0.0.1:1"}, Password: "p"},
		"bad endpoint":  {Endpoints: []string{"127.0.0.1:2379"}},
	} {
		if c, err := etcdepoch.NewClientWith(c); !errors.Is(err, etcdepoch.ErrClientConfig) {
			if c != nil {
				_ = c.Close()
			}
			t.Errorf("%s: %v, want ErrClientConfig", name, err)
		}
	}
}
