package p2p

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	msgs := [][]byte{nil, {1}, bytes.Repeat([]byte{7}, 1000)}
	for i, m := range msgs {
		if err := WriteFrame(&b, uint8(i+1), m); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range msgs {
		typ, p, err := ReadFrame(&b, 1000, nil)
		if err != nil || typ != uint8(i+1) || !bytes.Equal(p, m) {
			t.Fatalf("frame %d: typ %d len %d err %v", i, typ, len(p), err)
		}
	}
	if _, _, err := ReadFrame(&b, 1000, nil); err != io.EOF {
		t.Fatalf("want EOF at end, got %v", err)
	}
}

func TestFrameLimitAndTruncation(t *testing.T) {
	var b bytes.Buffer
	WriteFrame(&b, 1, make([]byte, 100))
	if _, _, err := ReadFrame(bytes.NewReader(b.Bytes()), 99, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(b.Bytes()[:50]), 100, nil); err != io.ErrUnexpectedEOF {
		t.Fatalf("want ErrUnexpectedEOF on truncated payload, got %v", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	var b bytes.Buffer
	WriteFrame(&b, 3, []byte("hello"))
	f.Add(b.Bytes())
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			_, p, err := ReadFrame(r, 1<<10, nil)
			if err != nil {
				return
			}
			if len(p) > 1<<10 {
				t.Fatalf("payload %d over limit", len(p))
			}
		}
	})
}
