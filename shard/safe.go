package shard

import (
	"fmt"
	"runtime/debug"
)

// safeCall runs an application callback, turning a panic into an error that
// names the callback and carries the stack.
func safeCall(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// maxErrorText bounds the error text written to etcd.
const maxErrorText = 4096

// truncateError returns err's text cut to maxErrorText bytes.
func truncateError(err error) string {
	s := err.Error()
	if len(s) > maxErrorText {
		const mark = "…(truncated)"
		cut := maxErrorText - len(mark)
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		s = s[:cut] + mark
	}
	return s
}
