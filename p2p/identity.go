package p2p

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// IdentityFile is the name of the node's private key file inside its home
// directory. It holds the key as marshalled by libp2p's crypto.MarshalPrivateKey
// (a small protobuf: key type + key bytes), readable by the owner only.
const IdentityFile = "identity.key"

// maxIdentitySize bounds the identity file read from disk. An Ed25519 key is
// 68 bytes marshalled; RSA-4096 about 2.4 KiB.
const maxIdentitySize = 8 << 10

var (
	// ErrIdentityCorrupt is returned when the identity file exists but cannot be
	// decoded into a private key. The node refuses to start rather than silently
	// take a new identity.
	ErrIdentityCorrupt = errors.New("p2p: identity key file is corrupt")
	// ErrIdentityPermissions is returned when the identity file is readable or
	// writable by users other than its owner.
	ErrIdentityPermissions = errors.New("p2p: identity key file is accessible by other users")
)

// LoadOrCreateIdentity returns the private key stored in dir/identity.key,
// creating dir (0700) and a new Ed25519 key (file mode 0600) on first start.
// created reports whether a new key was written. A file that exists but does
// not decode yields ErrIdentityCorrupt; one accessible by group or others
// yields ErrIdentityPermissions (like ssh, we refuse to use an exposed key).
func LoadOrCreateIdentity(dir string) (key crypto.PrivKey, created bool, err error) {
	if dir == "" {
		return nil, false, errors.New("p2p: identity: empty home directory")
	}
	path := filepath.Join(dir, IdentityFile)
	key, err = loadIdentity(path)
	if err == nil {
		return key, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	key, _, err = crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("p2p: identity: generate key: %w", err)
	}
	if err := writeIdentity(path, key); err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// loadIdentity reads and decodes the key file at path. A missing file is
// reported with an error wrapping fs.ErrNotExist.
func loadIdentity(path string) (crypto.PrivKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("p2p: identity: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("p2p: identity: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrIdentityCorrupt, path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o, want 0600", ErrIdentityPermissions, path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxIdentitySize+1))
	if err != nil {
		return nil, fmt.Errorf("p2p: identity: read %s: %w", path, err)
	}
	key, err := decodeIdentity(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// decodeIdentity turns the bytes of an identity file into a private key.
func decodeIdentity(data []byte) (crypto.PrivKey, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty file", ErrIdentityCorrupt)
	}
	if len(data) > maxIdentitySize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrIdentityCorrupt, maxIdentitySize)
	}
	key, err := crypto.UnmarshalPrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentityCorrupt, err)
	}
	return key, nil
}

// writeIdentity stores key at path atomically (writeFileAtomic), so a crash
// never leaves a half-written key behind.
func writeIdentity(path string, key crypto.PrivKey) error {
	data, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		return fmt.Errorf("p2p: identity: marshal key: %w", err)
	}
	if err := writeFileAtomic(path, data); err != nil {
		return fmt.Errorf("p2p: identity: %w", err)
	}
	return nil
}

// writeFileAtomic stores data at path (its directory created if missing,
// mode 0600): temp file, fsync, rename, fsync of the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: not every filesystem supports directory fsync
		d.Close()
	}
	return nil
}
