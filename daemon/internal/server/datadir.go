package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The data directory holds one member's durable identity: serve locks it
// (<data-dir>/LOCK, an exclusive flock held for the life of the process, so
// two processes never share one) and keeps a random instance id in
// <data-dir>/instance. The member announces that id (MemberSpec.Instance):
// a restart after a crash finds its own previous incarnation's key and
// reclaims it at once, while a key held under another instance id belongs
// to another process.

// lockDataDir takes the exclusive lock of dir; release unlocks it.
func lockDataDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("--data-dir %s is in use by another consumerd process (it holds %s): give each process its own --data-dir", dir, path)
		}
		return nil, fmt.Errorf("--data-dir %s: locking %s: %w", dir, path, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the flock
}

// dataDirInstance returns the instance id kept in dir, creating it the
// first time.
func dataDirInstance(dir string) (string, error) {
	path := filepath.Join(dir, "instance")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if len(id) == 32 {
			if _, err := hex.DecodeString(id); err == nil {
				return id, nil
			}
		}
		return "", fmt.Errorf("--data-dir %s: %s holds %q, not an instance id (32 hex digits): delete the file to make a new one", dir, path, b)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("making an instance id: %w", err)
	}
	id := hex.EncodeToString(raw)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	return id, nil
}
