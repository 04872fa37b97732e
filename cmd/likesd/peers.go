package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/likes-dev/likes/internal/peertls"
)

// peerSecurity are the flags of the region-to-region plane: mutual TLS and
// the gossip key (DESIGN section 10).
type peerSecurity struct {
	cert, key, ca string
	gossipKeyFile string
	insecure      bool
}

func (p *peerSecurity) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cert, "tls-cert", "", "this region's certificate (PEM; likectl certs issue) for mutual TLS with the other regions")
	fs.StringVar(&p.key, "tls-key", "", "the certificate's private key (PEM, mode 0600)")
	fs.StringVar(&p.ca, "tls-ca", "", "the CA every region's certificate chains to (PEM)")
	fs.StringVar(&p.gossipKeyFile, "gossip-key-file", "", "file with the memberlist key (base64 of 16, 24 or 32 bytes; likectl certs init writes one); further lines are old keys still accepted during a rotation")
	fs.BoolVar(&p.insecure, "insecure-plaintext-peers", false, "INSECURE: talk to other regions in plaintext, unauthenticated (a trusted private network only)")
}

// load returns the region's identity and gossip keys (the first sends), or
// nil, nil for the explicit plaintext choice (after a loud warning).
func (p *peerSecurity) load(region string, logger *slog.Logger) (*peertls.Identity, [][]byte, error) {
	any := p.cert != "" || p.key != "" || p.ca != "" || p.gossipKeyFile != ""
	if p.insecure {
		if any {
			return nil, nil, errors.New("run: --insecure-plaintext-peers cannot be combined with --tls-* or --gossip-key-file")
		}
		logger.Warn("INSECURE: --insecure-plaintext-peers: replication and forwarding are plaintext and unauthenticated; anyone who reaches the gRPC and gossip ports can change this region's counts")
		return nil, nil, nil
	}
	if p.cert == "" || p.key == "" || p.ca == "" || p.gossipKeyFile == "" {
		return nil, nil, errors.New("run: regions talk over mutual TLS with a keyed gossip: give --tls-cert, --tls-key, --tls-ca and --gossip-key-file (make them with `likectl certs init` and `likectl certs issue --region NAME`), or --insecure-plaintext-peers on a trusted network")
	}
	id, err := peertls.Load(p.cert, p.key, p.ca)
	if err != nil {
		return nil, nil, fmt.Errorf("run: %w", err)
	}
	if id.Region != region {
		return nil, nil, fmt.Errorf("run: --tls-cert names region %q, this is region %q", id.Region, region)
	}
	key, err := readGossipKey(p.gossipKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("run: %w", err)
	}
	return id, key, nil
}

// readGossipKey reads base64 memberlist keys of 16, 24 or 32 bytes, one a
// line, from a file that others cannot read: the first is the key this
// region sends with, the others are accepted too (a rotation in progress).
func readGossipKey(path string) ([][]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("gossip key %s has mode %v; it must not be readable by group or others (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("gossip key %s line %d is not base64: %v", path, i+1, err)
		}
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("gossip key %s line %d is %d bytes; it must be 16, 24 or 32", path, i+1, n)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("gossip key %s holds no key", path)
	}
	return keys, nil
}

// devPeerSecurity makes (on first start) and loads the development CA, one
// certificate per region and a gossip key under data/certs, so likesd dev's
// regions talk over mutual TLS and keyed gossip like a deployment.
func devPeerSecurity(data string, regions []string) (map[string]*peertls.Identity, [][]byte, error) {
	dir := filepath.Join(data, "certs")
	ids, err := peertls.EnsureDev(dir, regions)
	if err != nil {
		return nil, nil, fmt.Errorf("dev certificates in %s: %w", dir, err)
	}
	kf := filepath.Join(dir, "gossip.key")
	if _, err := os.Stat(kf); errors.Is(err, os.ErrNotExist) {
		if err := writeGossipKey(kf); err != nil {
			return nil, nil, err
		}
	}
	key, err := readGossipKey(kf)
	return ids, key, err
}

// writeGossipKey writes a new random 32-byte key, base64, mode 0600.
func writeGossipKey(path string) error {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	return peertls.WriteNew(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600)
}

func first(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}

func rest(keys [][]byte) [][]byte {
	if len(keys) < 2 {
		return nil
	}
	return keys[1:]
}
