//go:build !unix

package shard

import "os"

// lockDir is a no-op where flock is not available.
func lockDir(dir string) (*os.File, error) { return nil, nil }

func unlockDir(d *os.File) error { return nil }

// CheckFree is a no-op where flock is not available.
func CheckFree(dir string) error { return nil }
