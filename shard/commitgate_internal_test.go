package shard

import (
	"testing"
	"time"

	"github.com/consumerd/consumerd/internal/waitfor"
)

// A slot is given back once, by its release or after commitSlotHold,
// whichever comes first: a stalled commit does not hold the member's other
// primaries for longer.
func TestCommitSlotGivenBackOnce(t *testing.T) {
	g := newCommitGate(1)
	s, ok := g.tryAcquire()
	if !ok {
		t.Fatal("the free slot was not taken")
	}
	if _, ok := g.tryAcquire(); ok {
		t.Fatal("a second slot was taken from a gate of one")
	}
	s.release()
	s.release() // a second release gives nothing back twice
	s2, ok := g.tryAcquire()
	if !ok {
		t.Fatal("the released slot was not free")
	}
	if _, ok := g.tryAcquire(); ok {
		t.Fatal("a release given back twice freed two slots")
	}

	// s2 is never released: the hold bound gives it back.
	start := time.Now()
	var s3 *commitSlot
	waitfor.Until(t, 10*time.Second, "the held slot given back", func() (bool, string) {
		s3, ok = g.tryAcquire()
		return ok, "still held"
	})
	if held := time.Since(start); held < commitSlotHold/2 {
		t.Fatalf("the slot was back after %s, before its hold bound %s", held, commitSlotHold)
	}
	s2.release() // late: must not free s3's slot
	if _, ok := g.tryAcquire(); ok {
		t.Fatal("a release after the hold bound freed another commit's slot")
	}
	s3.release()
	var nilSlot *commitSlot
	nilSlot.release() // safe
}
