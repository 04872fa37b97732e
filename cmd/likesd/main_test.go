package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunRefusesBadEngineCombinations: `likesd run` names the problem with an
// engine choice before it listens or dials anything.
func TestRunRefusesBadEngineCombinations(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "--region is required"},
		{[]string{"run", "--region", "us", "--store", "cassandra"}, "--store cassandra needs --cassandra"},
		{[]string{"run", "--region", "us", "--log", "kafka"}, "--log kafka needs --kafka"},
		{[]string{"run", "--region", "us", "--cache", "redis"}, "--cache redis needs --redis"},
		{[]string{"run", "--region", "us", "--cassandra", "127.0.0.1"}, "need --store cassandra"},
		{[]string{"run", "--region", "us", "--keyspace", "k"}, "need --store cassandra"},
		{[]string{"run", "--region", "us", "--kafka", "127.0.0.1:9092"}, "need --log kafka"},
		{[]string{"run", "--region", "us", "--redis", "127.0.0.1:6379"}, "need --cache redis"},
		{[]string{"run", "--region", "us", "--kafka-replication", "0"}, "--kafka-replication 0 out of range"},
		{[]string{"run", "--region", "us", "--regions", "us,eu"}, "--etcd is required with several --regions"},
		{[]string{"run", "--region", "us", "--seeds", "127.0.0.1:7946"}, "--seeds and --peer-addrs need --etcd"},
		{[]string{"run", "--region", "us", "--regions", "us,eu", "--etcd", "http://127.0.0.1:1", "--store", "cassandra", "--cassandra", "127.0.0.1"},
			"no token verification configured"}, // engines regions replicate now: it gets as far as the token check

		{[]string{"run", "--region", "us", "--etcd", "http://127.0.0.1:1", "--seeds", "127.0.0.1:7946", "--log", "kafka", "--kafka", "127.0.0.1:9092"},
			"no token verification configured"},

		{[]string{"run", "--region", "us", "--store", "mysql"}, `unknown Store "mysql"`},
		{[]string{"dev", "--regions", "us,eu", "--store", "cassandra", "--cassandra", "127.0.0.1"}, "run one region only"},
		{[]string{"dev", "--regions", "us", "--cache", "redis"}, "--cache redis needs --redis"},
		{[]string{"etcd", "--host", "0.0.0.0"}, "beyond loopback"},
		{[]string{"run", "--region", "us", "--redis-tls-ca", "ca.pem"}, "--redis-tls-* need the redis engine"},
		{[]string{"run", "--region", "us", "--store", "cassandra", "--cassandra", "h", "--cassandra-tls-cert", "c.pem"}, "--cassandra-tls-ca is required"},
		{[]string{"run", "--region", "us", "--log", "kafka", "--kafka", "h:1", "--kafka-tls-ca", "/nonexistent.pem"}, "--kafka-tls-ca"},
		{[]string{"run", "--region", "us", "--cache", "redis", "--redis", "h:1", "--redis-tls-ca", "ca.pem", "--redis-tls-key", "k.pem"}, "go together"},
		{[]string{"etcd", "--tls-cert", "c.pem"}, "go together"},
		{[]string{"etcd", "--tls-ca", "ca.pem"}, "go together"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("likesd %s: error %v, want one mentioning %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestRunRefusesMissingPeerSecurity: a clustered `likesd run` needs its
// certificate, key, CA and gossip key, or the explicit plaintext choice; files
// that do not fit are refused before anything listens.
func TestRunRefusesMissingPeerSecurity(t *testing.T) {
	dir := t.TempDir()
	var sink bytes.Buffer
	if err := run(context.Background(), []string{"run"}, &sink, &sink); err == nil {
		t.Fatal("run without flags succeeded")
	}
	ids, key, err := devPeerSecurity(dir, []string{"us", "eu"})
	if err != nil || ids["us"] == nil || len(key) != 1 || len(key[0]) != 32 {
		t.Fatalf("devPeerSecurity = %v, %d keys, %v", ids, len(key), err)
	}
	certs := dir + "/certs/"
	base := []string{"run", "--region", "us", "--regions", "us,eu", "--etcd", "http://127.0.0.1:1", "--insecure-dev-secret"}
	full := append(append([]string(nil), base...), "--tls-cert", certs+"us.crt", "--tls-key", certs+"us.key", "--tls-ca", certs+"ca.crt", "--gossip-key-file", certs+"gossip.key")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{base, "give --tls-cert, --tls-key, --tls-ca and --gossip-key-file"},
		{append(append([]string(nil), base...), "--tls-cert", certs+"us.crt"), "give --tls-cert"},
		{append(append([]string(nil), full...), "--insecure-plaintext-peers"), "cannot be combined"},
		{append(append([]string(nil), base...), "--tls-cert", certs+"eu.crt", "--tls-key", certs+"eu.key", "--tls-ca", certs+"ca.crt", "--gossip-key-file", certs+"gossip.key"), `names region "eu"`},
		{append(append([]string(nil), base...), "--tls-cert", certs+"us.crt", "--tls-key", certs+"eu.key", "--tls-ca", certs+"ca.crt", "--gossip-key-file", certs+"gossip.key"), "certificate and key"},
		{append(append([]string(nil), base...), "--tls-cert", certs+"us.crt", "--tls-key", certs+"us.key", "--tls-ca", certs+"ca.crt", "--gossip-key-file", certs+"ca.crt"), "gossip key"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("likesd %s: error %v, want one mentioning %q", strings.Join(tc.args[6:], " "), err, tc.want)
		}
	}
}

// TestVersion: `likesd version` prints the build and exits 0, with no
// network and no data folder.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errb); err != nil {
		t.Fatalf("likesd version: %v (%s)", err, errb.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "likes ") || !strings.Contains(s, "go1.") {
		t.Fatalf("likesd version printed %q", s)
	}
}
