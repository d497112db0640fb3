package windows

import (
	"fmt"
	"math"
)

// Event time is int64 milliseconds since the Unix epoch.
const (
	// MaxTime is the end of input: a watermark of MaxTime completes every
	// window.
	MaxTime = math.MaxInt64
	// MinTime means "no watermark yet": nothing is known to be complete.
	MinTime = math.MinInt64
)

// Window is the half-open event-time interval [Start, End).
//
// Windows at the very ends of the int64 range are clipped to [MinTime,
// MaxTime] rather than wrapped, so that a window contains the event time it
// was made for; MaxTime itself, the end of input rather than an event time,
// is in no half-open window.
type Window struct{ Start, End int64 }

// MaxTimestamp is the window's last event time. The window is complete once
// the watermark is ≥ MaxTimestamp: every later event is then > End-1, so
// none of them falls in it.
func (w Window) MaxTimestamp() int64 { return w.End - 1 }

// String formats the window as "[start,end)".
func (w Window) String() string { return fmt.Sprintf("[%d,%d)", w.Start, w.End) }

// Tumble returns the tumbling window of length size that contains ts:
// windows are aligned to multiples of size counted from epoch 0, for
// negative ts too (floor division, not Go's truncation).
//
// It panics if size <= 0, a programming error (a window length is a
// constant of the app, not input).
func Tumble(ts, size int64) Window {
	if size <= 0 {
		panic(fmt.Sprintf("windows.Tumble: size %d must be positive", size))
	}
	return window(ts, floorMod(ts, size), size)
}

// Hop appends to dst every hopping window of length size, starting at a
// multiple of slide, that contains ts, in ascending Start, and returns the
// extended slice: size/slide windows. Passing dst[:0] of a reused slice
// avoids an allocation per event.
//
// It panics if size <= 0, slide <= 0 or size is not a multiple of slide:
// these are programming errors (window shapes are constants of the app),
// and a size that is not a multiple of slide would give a varying number
// of windows per event, which no caller of Hop expects.
func Hop(ts, size, slide int64, dst []Window) []Window {
	if size <= 0 || slide <= 0 || size%slide != 0 {
		panic(fmt.Sprintf("windows.Hop: size %d and slide %d must be positive, and size a multiple of slide", size, slide))
	}
	mod := floorMod(ts, slide)
	n := size / slide
	// Window i (ascending) starts (n-1-i) slides before the slide-aligned
	// start at or before ts. Offsets are taken from ts, each within
	// [-size, size], so only the final additions can leave int64, and
	// those saturate.
	for i := int64(0); i < n; i++ {
		dst = append(dst, window(ts, mod+(n-1-i)*slide, size))
	}
	return dst
}

// window is [ts-back, ts-back+size), each bound saturated at the ends of
// int64. back is in [0, size).
func window(ts, back, size int64) Window {
	return Window{Start: satAdd(ts, -back), End: satAdd(ts, size-back)}
}

// floorMod is ts mod m in [0, m), for m > 0.
func floorMod(ts, m int64) int64 {
	r := ts % m
	if r < 0 {
		r += m
	}
	return r
}

// satAdd is a+b clamped to [MinTime, MaxTime].
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return MaxTime
	case b < 0 && s > a:
		return MinTime
	}
	return s
}
