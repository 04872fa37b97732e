package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/likes-dev/likes/auth"
)

// TestTokenWithPrivateKey: likectl token-key writes a key pair; a token from
// `likectl token --private-key` verifies with the public key only, with its
// iss and aud, and not with the development secret.
func TestTokenWithPrivateKey(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "ops.pem")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"token-key", "--out", key}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"token-key", "--out", key}, &out, &errb); err == nil {
		t.Fatal("token-key overwrote an existing key")
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", fi.Mode(), err)
	}
	out.Reset()
	t.Setenv(auth.EnvSecret, "")
	if err := run(context.Background(), []string{"token", "--user", "op", "--admin", "--private-key", key, "--iss", "ops", "--aud", "likes"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out.String())
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ParsePublicKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Config{PublicKeys: keys, Issuer: "ops", Audience: "likes", MaxLifetime: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := v.Verify(tok); err != nil || c.User != "op" || !c.Admin {
		t.Fatalf("verify: %+v %v", c, err)
	}
	if _, err := auth.NewVerifier([]byte(auth.DevSecret), time.Now).Verify(tok); err == nil {
		t.Fatal("an EdDSA token verified with the development secret")
	}
	if err := run(context.Background(), []string{"token", "--user", "op", "--private-key", key + ".pub"}, &out, &errb); !errors.Is(err, errFlags) {
		t.Fatalf("signing with a public key file: %v", err)
	}
}

func TestEtcdFlagsValidated(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"pins", "list", "--etcd", "http://127.0.0.1:1", "--etcd-cacert", "ca.pem"},
		{"pins", "list", "--etcd", "https://127.0.0.1:1", "--etcd-cert", "c.pem"},
		{"regions", "--etcd", "127.0.0.1:2379"},
	} {
		err := run(context.Background(), args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "bad etcd client configuration") {
			t.Errorf("likectl %s: %v", strings.Join(args, " "), err)
		}
	}
}
