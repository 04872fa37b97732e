package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayLight: the client is for others to import, so it links the
// standard library and the clock package only (no store, no gRPC, no etcd).
func TestImportsStayLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/likes-dev/likes/client").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(p, "/")
		if !strings.Contains(first, ".") || strings.HasPrefix(p, "vendor/") {
			continue // the standard library
		}
		if p != "github.com/likes-dev/likes/client" && p != "github.com/likes-dev/likes/clock" {
			t.Errorf("the client depends on %s", p)
		}
	}
}
