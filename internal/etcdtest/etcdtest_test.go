package etcdtest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStart(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "a")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "1" {
		t.Fatalf("get: %v %v", r, err)
	}
	// A second server is independent.
	c2 := Start(t)
	r, err = c2.Get(ctx, "a")
	if err != nil || len(r.Kvs) != 0 {
		t.Fatalf("second server not fresh: %v %v", r, err)
	}
}
