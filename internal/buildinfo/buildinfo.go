// Package buildinfo reports what build is running: the module version, the
// VCS revision it was built from (and whether the tree had local changes),
// and the Go version, from the binary's embedded build information. It is
// read once; it does no I/O.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info describes the running build.
type Info struct {
	Version   string // the main module's version ("(devel)" for a local build)
	Revision  string // VCS revision ("" when unknown)
	Modified  bool   // the tree had uncommitted changes
	GoVersion string
}

var get = sync.OnceValue(func() Info {
	in := Info{Version: "(devel)", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	if v := bi.Main.Version; v != "" {
		in.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
})

// Get returns the running build's information.
func Get() Info { return get() }

// String is the one-line form `likesd version` prints.
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	if i.Modified {
		rev += "+modified"
	}
	return "likes " + i.Version + " (revision " + rev + ", " + i.GoVersion + ")"
}
