package epochtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/likes-dev/likes/epoch/etcdembed"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// SecureEtcd is an embedded etcd serving clients over mutual TLS with auth
// enabled, and the files and credentials to reach it. Its certificates are
// throwaway, generated under t.TempDir.
type SecureEtcd struct {
	*etcdembed.Embedded
	// CA is the PEM CA that signed the server's and the client's certificates.
	CA string
	// Cert and Key are a client certificate the server accepts.
	Cert, Key string
	// User and Password may read and write every key (role "likes").
	User, Password string
	// RootPassword is the password of "root".
	RootPassword string
}

// Client returns the ClientConfig of s's likes user (a copy to adjust).
func (s *SecureEtcd) Client() etcdepoch.ClientConfig {
	return etcdepoch.ClientConfig{Endpoints: s.Endpoints(), CACert: s.CA, Cert: s.Cert, Key: s.Key, Username: s.User, Password: s.Password}
}

// Root dials s as root (to change users and roles in a test), closed when t ends.
func (s *SecureEtcd) Root(t testing.TB) *clientv3.Client {
	t.Helper()
	c := s.Client()
	c.Username, c.Password = "root", s.RootPassword
	cli, err := etcdepoch.NewClientWith(c)
	if err != nil {
		t.Fatalf("dial etcd as root: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// StartSecureEmbedded starts an embedded etcd on loopback that requires a
// client certificate from its CA (https only), creates the users root and
// likes (role likes: readwrite on every key) and enables auth.
func StartSecureEmbedded(t testing.TB) *SecureEtcd {
	t.Helper()
	dir := t.TempDir()
	s := &SecureEtcd{User: "likes", Password: "likes-test-password", RootPassword: "root-test-password"}
	s.CA, s.Cert, s.Key = writeTestPKI(t, dir)
	serverCert, serverKey := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	var lastErr error
	for range 3 { // a just-freed port can be taken by someone else
		e, err := etcdembed.StartEmbedded(etcdembed.EmbeddedConfig{
			Dir: t.TempDir(), ClientAddr: FreeAddr(t), PeerAddr: FreeAddr(t), Knobs: &etcdembed.TestingKnobs{NoFsync: true, LowBcryptCost: true},
			ClientTLS: etcdembed.EmbeddedTLS{CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: s.CA, ClientCertAuth: true},
		})
		if err == nil {
			t.Cleanup(e.Close)
			s.Embedded = e
			break
		}
		lastErr = err
	}
	if s.Embedded == nil {
		t.Fatalf("start secure embedded etcd: %v", lastErr)
	}
	c := s.Client()
	c.Username, c.Password = "", ""
	cli, err := etcdepoch.NewClientWith(c)
	if err != nil {
		t.Fatalf("dial secure etcd: %v", err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", s.RootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "likes"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "likes", "\x00", "\x00", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, s.User, s.Password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, s.User, "likes"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("secure etcd setup step %d: %v", i, err)
		}
	}
	return s
}

// writeTestPKI writes a throwaway CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate, as PEM files under dir.
func writeTestPKI(t testing.TB, dir string) (ca, cert, key string) {
	t.Helper()
	now := time.Now()
	caKey := mustKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "likes test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) {
		k := mustKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
		writePEM(t, filepath.Join(dir, name+"-key.pem"), "PRIVATE KEY", kd)
	}
	leaf("server", 2, x509.ExtKeyUsageServerAuth)
	leaf("client", 3, x509.ExtKeyUsageClientAuth)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER)
	return filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
}

func mustKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
