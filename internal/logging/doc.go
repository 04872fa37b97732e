// Package logging builds the process's one slog handler from the
// --log-format and --log-level flags, and bridges zap loggers (etcd's
// embedded server and its client log through zap) into that handler.
//
// Role: every component of likesd logs through the *slog.Logger made by New;
// Zap turns it into a *zap.Logger for the libraries that want one, with zap's
// levels mapped onto slog's (debug → debug, info → info, warn → warn, error
// and above → error; the entry's logger name becomes the "logger" attribute).
//
// Concurrency: the handlers and the zap core are safe for concurrent use (the
// slog handlers serialise their writes). Invariants: a flag value New does not
// know is refused (ErrBadFlag), never silently replaced by a default; the
// bridge never writes below the level it was built with.
package logging
