package epoch_test

import (
	"context"
	"testing"
	"time"

	"likes/epoch"
	"likes/epoch/epochtest"
)

func TestEmbeddedServesAndClosesIdempotently(t *testing.T) {
	e := epochtest.StartEmbedded(t)
	cli, err := epoch.NewClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e.Close()
	if _, open := <-e.Err(); open {
		t.Fatal("Err channel not closed after Close")
	}
}

func TestEmbeddedConfigValidated(t *testing.T) {
	if _, err := epoch.StartEmbedded(epoch.EmbeddedConfig{Dir: t.TempDir()}); err == nil {
		t.Fatal("StartEmbedded without addresses succeeded")
	}
}
