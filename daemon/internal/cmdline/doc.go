// Package cmdline holds what every command of consumerd's command line
// shares, whichever job it does: the Program (the binary's apps, name,
// streams, environment and signals), usage errors and exit codes (Usage,
// Usagef, IsUsage, ExitError: exit 2 for a bad flag, 1 for any other error),
// the flags' environment mirrors (CONSUMERD_ + the flag upper-cased with '.'
// and '-' as '_'; a flag given wins: ApplyEnv), the process logger
// (NewLogger), the listings' -o formats, and bounded waits so that a
// command never outlives its --timeout.
//
// It sits below the packages that build commands (server, cli, and the
// public daemon that assembles the tree) and knows none of them.
package cmdline
