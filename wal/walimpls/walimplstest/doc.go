// Package walimplstest is the conformance suite every WAL backend
// (walimpls) must pass: Run(t, newBuilder) runs subtests that each get a
// builder on a fresh backend from newBuilder.
//
// Its waits are bounded, so a stall fails and never hangs: 10s for an
// expected message or scanner stop, 2s for a scanner's Close, and 300ms of
// watching a scanner that must deliver nothing (DeliverLatest on an idle
// channel, or after the last message). A correct backend meets them with a
// wide margin.
//
// It checks concurrent appenders on parallel channels (every acknowledged
// append read back exactly once, in id order, per-appender call order,
// key/payload/properties intact); ids strictly increasing and never reused
// across opener close and rebuild; distinct channel names kept apart;
// DeliverAll, DeliverLatest (nothing on an idle channel), DeliverStartFrom
// (inclusive), DeliverStartAfter (exclusive); Truncate then reading a removed
// position fails with ErrTruncated (from Read or the scanner's Error; never a
// silent skip); fencing by term (ErrFenced for every later append of a lower
// term, across openers); scanners closed early end promptly with
// ErrScannerClosed; closing a WAL stops its scanners; appends after Close
// fail with ErrClosed; LastID; the optional Counter and ChannelRemover.
//
// The Async section (async.go) checks walimpls.AsyncAppender with pipelined
// appends: every callback exactly once, in any order; ids in call order for
// concurrent goroutines and for a fenced writer; a fence mid-pipeline leaves
// a stored prefix and a re-send is fenced; after a failure nothing handed in
// while earlier outcomes are unreported is stored; Close with appends in
// flight reports each. The Adaptor section (adaptor.go) runs the backend
// under the wal adaptor: callbacks one at a time in call order with ids in
// that order, and a fence mid-pipeline ending in ErrFenced for every later
// append. The suite's own tests (selftest_test.go) show it failing backends
// that store out of call order, drop or repeat a callback, or store after a
// failure, and passing one that reports out of order.
package walimplstest
