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

// TestConformanceShuffledAcks runs the suite with outcomes reported out of
// call order.
func TestConformanceShuffledAcks(t *testing.T) {
	walimplstest.Run(t, func(t *testing.T) walimpls.OpenerBuilderImpls {
		b := memory.NewBuilder()
		b.ShuffleAcks(7)
		return b
	})
}
