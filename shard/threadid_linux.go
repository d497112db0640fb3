package shard

import "syscall"

// osThreadID identifies the OS thread the caller runs on (see
// compactionFilter.kept).
func osThreadID() int { return syscall.Gettid() }
