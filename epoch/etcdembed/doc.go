// Package etcdembed runs an in-process, single-member etcd server: the
// embedded default's etcd (`likesd dev`, `likesd etcd`) and the tests'. It is
// the only package that links the etcd server; the pin directory, leases and
// the controller (package etcdepoch) need only a client, and the pure pin
// rule (package epoch) needs neither.
//
// Concurrency: an Embedded is safe for concurrent use; Close is idempotent.
package etcdembed
