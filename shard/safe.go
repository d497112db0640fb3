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
