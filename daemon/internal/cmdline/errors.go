package cmdline

import (
	"errors"
	"fmt"
	"strings"
)

// usageError marks a bad flag value or argument: exit code 2, printed with
// a pointer to --help.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func (e usageError) Unwrap() error { return e.err }

// Usagef is a usage error with a formatted message.
func Usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Usage marks err as a usage error. A nil err stays nil; an error already
// marked is returned as it is.
func Usage(err error) error {
	if err == nil || errors.As(err, new(usageError)) {
		return err
	}
	return usageError{err}
}

// IsUsage reports whether err is a usage error: marked by Usage or Usagef,
// or one of cobra's and pflag's own argument errors.
func IsUsage(err error) bool {
	return errors.As(err, new(usageError)) || isCobraUsageError(err)
}

// ExitError ends a command with a specific exit code; Err may be nil when
// the command has already reported why.
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e ExitError) Unwrap() error { return e.Err }

// isCobraUsageError recognises cobra's and pflag's own argument errors,
// which are plain errors: their texts are the only mark they carry.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "required flag", "bad flag syntax", "if any flags in the group"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
