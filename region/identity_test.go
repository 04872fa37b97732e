package region_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/likes-dev/likes/region"
)

// TestOpenRefusesAnotherRegionsFolder: likesd refuses to start a region on a
// folder that holds another region's data, with a clear error, and restarts
// on its own folder.
func TestOpenRefusesAnotherRegionsFolder(t *testing.T) {
	base := t.TempDir()
	r, err := region.Open(context.Background(), config(base))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	id, ok, err := region.ReadIdentity(filepath.Join(base, "us"))
	if err != nil || !ok || id.Region != "us" {
		t.Fatalf("identity after the first start: %+v ok=%v err=%v", id, ok, err)
	}
	// The operator moves us's folder under eu's name.
	if err := os.Rename(filepath.Join(base, "us"), filepath.Join(base, "eu")); err != nil {
		t.Fatal(err)
	}
	cfg := config(base)
	cfg.Name = "eu"
	if r, err := region.Open(context.Background(), cfg); !errors.Is(err, region.ErrIdentity) || !strings.Contains(err.Error(), `holds region "us"`) {
		if r != nil {
			_ = r.Close()
		}
		t.Fatalf("open eu on us's folder: %v, want ErrIdentity", err)
	}
	if err := os.Rename(filepath.Join(base, "eu"), filepath.Join(base, "us")); err != nil {
		t.Fatal(err)
	}
	r, err = region.Open(context.Background(), config(base))
	if err != nil {
		t.Fatalf("restart on its own folder: %v", err)
	}
	_ = r.Close()
}
