package walimplstest

import (
	"testing"
	"time"

	"github.com/consumerd/consumerd/wal/walimpls"
)

// Bounds of the suite's waits (the package doc states them for backend
// authors). They bound how long a broken backend can stall a test; a correct
// backend meets them with a wide margin.
const (
	// receiveTimeout bounds waiting for an expected message or scanner stop.
	receiveTimeout = 10 * time.Second
	// quietPeriod is how long the suite watches a scanner that must deliver
	// nothing (DeliverLatest on an idle channel, or after the last message).
	quietPeriod = 300 * time.Millisecond
	// closeTimeout bounds Close of a scanner: it must end promptly.
	closeTimeout = 2 * time.Second
)

// Run runs the conformance suite against a backend. newBuilder is called once
// per subtest and must return a builder on a fresh, empty backend (or a fresh
// channel namespace). Subtests build their own openers and close them.
func Run(t *testing.T, newBuilder func(t *testing.T) walimpls.OpenerBuilderImpls) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t testing.TB, b walimpls.OpenerBuilderImpls)
	}{
		{"ConcurrentAppendersParallelChannels", testConcurrentAppenders},
		{"IDsNeverReusedAfterReopen", testIDsNeverReused},
		{"DistinctChannelNames", testDistinctChannelNames},
		{"DeliverAll", testDeliverAll},
		{"DeliverLatest", testDeliverLatest},
		{"DeliverStartFromStartAfter", testDeliverStartFromAfter},
		{"TruncateThenReadRemovedPosition", testTruncate},
		{"TruncateBehindTailingScanner", testTruncateBehindScanner},
		{"Fencing", testFencing},
		{"ScannerCloseEarly", testScannerCloseEarly},
		{"WALCloseStopsScanners", testWALCloseStopsScanners},
		{"AppendAfterClose", testAppendAfterClose},
		{"LastID", testLastID},
		{"LastIDAfterTruncate", testLastIDAfterTruncate},
		{"Count", testCount},
		{"RemoveChannel", testRemoveChannel},
		{"NoCreate", testNoCreate},
		{"Bounds", testBounds},
		{"BatchChain", testBatchChain},
		{"BatchRace", testBatchRace},
		{"AsyncConcurrentPipelines", testAsyncConcurrent},
		{"AsyncFencedPipelineInCallOrder", testAsyncFencedOrder},
		{"AsyncFencingMidPipeline", testAsyncFencingMidPipeline},
		{"AsyncFailureStopsLaterAppends", testAsyncFailureMidPipeline},
		{"AsyncCloseWithAppendsInFlight", testAsyncCloseInFlight},
		{"AdaptorCallbacksInCallOrder", testAdaptorCallbackOrder},
		{"AdaptorFencingMidPipeline", testAdaptorFencingMidPipeline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			if b == nil {
				t.Fatal("newBuilder returned nil")
			}
			tc.fn(t, b)
		})
	}
}
