// Package clustermeta is the cluster metadata of a likes cluster: the
// parameters fixed when the cluster is created (the number of user ranges,
// the region lease TTL, the assumed bound on clock skew) and the version of
// the etcd key layout they were written under. etcdepoch.Directory.Init
// writes it once, in the transaction that creates the cluster, and never
// overwrites it; likectl and likesd read it instead of trusting parameters
// typed by hand (Meta.Check names every flag that disagrees).
//
// The package is pure: a type, its JSON codec and its validation, no I/O.
//
// Invariants:
//   - Decode is strict. The stored value is input from outside the process
//     (anyone with write access to etcd could have put it there): it must be
//     one JSON object of at most MaxSize bytes, with exactly the known fields,
//     each within its bounds; anything else is an error wrapping ErrInvalid
//     that says what is wrong. A layout newer than Layout is ErrNewerLayout
//     (upgrade this build), never a guess.
//   - Encode(Decode(b)) round-trips every valid value; Encode only writes
//     values Validate accepts.
//   - Equal parameters are what "the same cluster" means: CreatedAt is
//     informational and never compared.
//
// Concurrency: values are plain data; every function is safe for concurrent use.
package clustermeta
