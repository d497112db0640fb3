package walimpls_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/consumerd/consumerd/wal/walimpls"
)

type fakeBuilder string

func (f fakeBuilder) Name() string                         { return string(f) }
func (f fakeBuilder) Build() (walimpls.OpenerImpls, error) { return nil, errors.New("not a backend") }

func TestRegistry(t *testing.T) {
	r := walimpls.NewRegistry()
	if _, ok := r.Get("a"); ok {
		t.Fatal("empty registry has a")
	}
	if err := r.Register(fakeBuilder("b")); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(fakeBuilder("a")); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(fakeBuilder("")); err == nil {
		t.Fatal("empty name accepted")
	}
	if err := r.Register(nil); err == nil {
		t.Fatal("nil builder accepted")
	}
	if b, ok := r.Get("a"); !ok || b.Name() != "a" {
		t.Fatalf("Get(a) = %v, %v", b, ok)
	}
	if got := fmt.Sprint(r.Names()); got != "[a b]" {
		t.Fatalf("Names = %s", got)
	}
	walimpls.Register(fakeBuilder("registry-test"))
	if _, ok := walimpls.Get("registry-test"); !ok {
		t.Fatal("default registry lost a builder")
	}
}

func TestIsRetryable(t *testing.T) {
	transient := errors.New("timeout")
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{transient, true},
		{fmt.Errorf("wrapped: %w", transient), true},
		{fmt.Errorf("x: %w", walimpls.ErrFenced), false},
		{fmt.Errorf("x: %w", walimpls.ErrClosed), false},
		{fmt.Errorf("x: %w", walimpls.ErrTruncated), false},
		{walimpls.ErrScannerClosed, false},
		{context.Canceled, false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{walimpls.Permanent(transient), false},
		{fmt.Errorf("x: %w", walimpls.Permanent(transient)), false},
	}
	for _, c := range cases {
		if got := walimpls.IsRetryable(c.err); got != c.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !errors.Is(walimpls.Permanent(transient), transient) {
		t.Error("Permanent hides the wrapped error from errors.Is")
	}
	if walimpls.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}
