//go:build !unix

package train

import "os"

// mapFile reads a whole file (no mmap on this platform).
func mapFile(path string) ([]byte, func() error, error) {
	b, err := os.ReadFile(path)
	return b, func() error { return nil }, err
}
