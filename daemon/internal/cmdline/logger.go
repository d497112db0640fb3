package cmdline

import (
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
)

// durationStrings wraps a JSON logger so time.Duration values print as Go
// duration strings ("1.5s") rather than hclog's integer nanoseconds: a log
// line a person reads should not need a calculator. It wraps every logger
// derived through With, Named and ResetNamed too.
type durationStrings struct{ hclog.Logger }

func stringDurations(args []interface{}) []interface{} {
	var out []interface{}
	for i, a := range args {
		if d, ok := a.(time.Duration); ok && i%2 == 1 {
			if out == nil {
				out = append([]interface{}(nil), args...)
			}
			out[i] = d.String()
		}
	}
	if out == nil {
		return args
	}
	return out
}

func (l durationStrings) Log(level hclog.Level, msg string, args ...interface{}) {
	l.Logger.Log(level, msg, stringDurations(args)...)
}
func (l durationStrings) Trace(msg string, args ...interface{}) {
	l.Logger.Trace(msg, stringDurations(args)...)
}
func (l durationStrings) Debug(msg string, args ...interface{}) {
	l.Logger.Debug(msg, stringDurations(args)...)
}
func (l durationStrings) Info(msg string, args ...interface{}) {
	l.Logger.Info(msg, stringDurations(args)...)
}
func (l durationStrings) Warn(msg string, args ...interface{}) {
	l.Logger.Warn(msg, stringDurations(args)...)
}
func (l durationStrings) Error(msg string, args ...interface{}) {
	l.Logger.Error(msg, stringDurations(args)...)
}
func (l durationStrings) With(args ...interface{}) hclog.Logger {
	return durationStrings{l.Logger.With(stringDurations(args)...)}
}
func (l durationStrings) Named(name string) hclog.Logger {
	return durationStrings{l.Logger.Named(name)}
}
func (l durationStrings) ResetNamed(name string) hclog.Logger {
	return durationStrings{l.Logger.ResetNamed(name)}
}

// NewLogger builds a process logger from --log.level and --log.format
// ("text" or "json"; JSON prints durations as Go duration strings).
func NewLogger(level, format string, out io.Writer) hclog.Logger {
	l := hclog.New(&hclog.LoggerOptions{
		Name:       "consumerd",
		Level:      hclog.LevelFromString(level),
		JSONFormat: format == "json",
		Output:     out,
		TimeFormat: "2006-01-02T15:04:05.000Z07:00",
	})
	if format == "json" {
		return durationStrings{l}
	}
	return l
}
