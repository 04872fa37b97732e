// Package peertls is the identity of a region on the region-to-region plane
// (replication, forwarding, catch-up heads): mutual TLS with a private CA,
// the region's name in its certificate as the URI SAN likes://region/NAME.
//
// A server built with ServerConfig refuses plaintext clients, clients without
// a certificate and certificates of another CA during the handshake, before
// any handler runs; handlers then learn the caller's proven region with
// PeerRegion and check every claim a message makes (a batch's sender, the
// cells it carries, a forwarded request's origin) against it. A client built
// with ClientConfig(region) accepts only a server whose certificate names the
// region it meant to reach, so a gossip member that merely claims a region's
// name is never sent that region's traffic.
//
// Certificates are made with NewCA and Issue (stdlib crypto, ECDSA P-256),
// by `likectl certs` for deployments and by `likesd dev` for its regions.
// Everything here is safe for concurrent use; an Identity is immutable.
package peertls
