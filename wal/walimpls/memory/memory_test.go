package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/consumerd/consumerd/wal/walimpls"
	"github.com/consumerd/consumerd/wal/walimpls/memory"
	"github.com/consumerd/consumerd/wal/walimpls/walimplstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	walimplstest.Run(t, func(t *testing.T) walimpls.OpenerBuilderImpls { return memory.NewBuilder() })
}

func TestConformanceAsync(t *testing.T) {
	walimplstest.Run(t, func(t *testing.T) walimpls.OpenerBuilderImpls {
		b := memory.NewBuilder()
		b.EnableAsyncAppend(true)
		return b
	})
}
