// Package walimplstest is the conformance suite every WAL backend
// (walimpls) must pass: Run(t, newBuilder) runs subtests that each get a
// builder on a fresh backend from newBuilder.
//
// It checks, with bounded waits (a stall fails, it never hangs): concurrent
// appenders on parallel channels (every acknowledged append read back exactly
// once, in id order, per-appender call order, key/payload/properties intact);
// ids strictly increasing and never reused across opener close and rebuild;
// distinct channel names kept apart; DeliverAll, DeliverLatest (nothing on an
// idle channel), DeliverStartFrom (inclusive), DeliverStartAfter (exclusive);
// Truncate then reading a removed position fails with ErrTruncated (from Read
// or the scanner's Error; never a silent skip); fencing by term (ErrFenced
// for every later append of a lower term, across openers); scanners closed
// early end promptly with ErrScannerClosed; closing a WAL stops its scanners;
// appends after Close fail with ErrClosed; LastID.
//
// Term 0 (unfenced) WALs are not asserted on beyond plain appends.
package walimplstest
