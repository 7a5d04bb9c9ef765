package p2p

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
)

func TestIdentityCreatedThenReloaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home") // does not exist yet
	key1, created, err := LoadOrCreateIdentity(dir)
	if err != nil || !created {
		t.Fatalf("first start: created=%v err=%v", created, err)
	}
	st, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("identity file mode %04o, want 0600", st.Mode().Perm())
	}
	key2, created, err := LoadOrCreateIdentity(dir)
	if err != nil || created {
		t.Fatalf("second start: created=%v err=%v", created, err)
	}
	if !key1.Equals(key2) {
		t.Fatal("reloaded key differs from the created one")
	}
	if key1.Type() != crypto.Ed25519 {
		t.Fatalf("key type %v, want Ed25519", key1.Type())
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, IdentityFile+".tmp-*"))
	if len(leftovers) != 0 {
		t.Fatalf("temp files left behind: %v", leftovers)
	}
}

func TestHostKeepsPeerIDAcrossRestarts(t *testing.T) {
	home := t.TempDir()
	cfg := testConfig(t, "restart")
	cfg.Home = home
	h1, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	id1 := h1.ID()
	h1.Close()
	h2, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if h2.ID() != id1 {
		t.Fatalf("peer id changed across restart: %s then %s", id1, h2.ID())
	}
}

func TestIdentityErrors(t *testing.T) {
	cases := []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    error
	}{
		{"empty", nil, 0o600, ErrIdentityCorrupt},
		{"garbage", []byte("not a protobuf key at all"), 0o600, ErrIdentityCorrupt},
		{"truncated", validKeyBytes(t)[:20], 0o600, ErrIdentityCorrupt},
		{"too large", bytes.Repeat([]byte{8}, maxIdentitySize+1), 0o600, ErrIdentityCorrupt},
		{"world readable", validKeyBytes(t), 0o644, ErrIdentityPermissions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, IdentityFile)
			if err := os.WriteFile(path, c.content, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil { // umask may have narrowed it
				t.Fatal(err)
			}
			_, _, err := LoadOrCreateIdentity(dir)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, c.content) {
				t.Fatal("a bad identity file was overwritten")
			}
		})
	}
	t.Run("directory in place of file", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, IdentityFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateIdentity(dir); err == nil {
			t.Fatal("want an error for a directory named like the key file")
		}
	})
	t.Run("empty home", func(t *testing.T) {
		if _, _, err := LoadOrCreateIdentity(""); err == nil {
			t.Fatal("want an error for an empty home")
		}
	})
}

func validKeyBytes(t testing.TB) []byte {
	key, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{7}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeIdentity checks that any file content either decodes into a key
// that round-trips, or fails with ErrIdentityCorrupt; never a panic.
func FuzzDecodeIdentity(f *testing.F) {
	f.Add(validKeyBytes(f))
	f.Add([]byte{})
	f.Add([]byte{0x08, 0x01, 0x12, 0x40})
	f.Add([]byte{0x08, 0x00, 0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := decodeIdentity(data)
		if err != nil {
			if !errors.Is(err, ErrIdentityCorrupt) {
				t.Fatalf("error %v does not wrap ErrIdentityCorrupt", err)
			}
			return
		}
		again, err := crypto.MarshalPrivateKey(key)
		if err != nil {
			t.Fatalf("decoded key does not marshal: %v", err)
		}
		if _, err := decodeIdentity(again); err != nil {
			t.Fatalf("re-marshalled key does not decode: %v", err)
		}
	})
}
