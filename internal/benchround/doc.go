// Package benchround runs a benchmark's measurement in several rounds and
// prints its BENCH line with the median of every figure over the rounds and
// the spread (min and max) of the headline figures, so one disturbed round
// on a shared machine neither makes nor breaks a figure.
//
// A round measures everything its line reports, baselines included: a ratio
// is computed inside each round from the two sides that round measured, and
// the line's ratio is the median of those per-round ratios (not the ratio of
// the medians). The number of rounds is the benchmark's default unless
// CONSUMERD_BENCH_ROUNDS is set (make bench-quick sets it to 1).
package benchround
