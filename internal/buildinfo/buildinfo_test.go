package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	in := Get()
	if in.GoVersion != runtime.Version() || in.Version == "" {
		t.Fatalf("build info %+v", in)
	}
	if s := in.String(); !strings.HasPrefix(s, "likes ") || !strings.Contains(s, runtime.Version()) {
		t.Fatalf("String() = %q", s)
	}
}
