package node

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/intellect-node/intellect-node/p2p"
	"google.golang.org/protobuf/encoding/protowire"
)

// profileParts sums a runtime/pprof CPU profile's nanoseconds by the value
// of its samples' p2p.PartLabel label ("" for none). It reads the
// profile.proto fields it needs: string_table (6) and samples (2) with
// their values (2: count, nanoseconds) and labels (3: key, str).
func profileParts(gz []byte) (map[string]int64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var strs []string
	var samples [][]byte
	err = protoFields(raw, func(num protowire.Number, v []byte) error {
		switch num {
		case 6:
			strs = append(strs, string(v))
		case 2:
			samples = append(samples, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, s := range samples {
		part, ns, err := profileSample(s, strs)
		if err != nil {
			return nil, err
		}
		out[part] += ns
	}
	return out, nil
}

// profileSample reads one sample: its part label and CPU nanoseconds.
func profileSample(b []byte, strs []string) (part string, ns int64, err error) {
	var values []int64
	err = protoFields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 2:
			for len(v) > 0 {
				x, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return protowire.ParseError(n)
				}
				values, v = append(values, int64(x)), v[n:]
			}
		case 3:
			var key, str uint64
			perr := protoFields(v, func(num protowire.Number, f []byte) error {
				x, n := protowire.ConsumeVarint(f)
				if n < 0 {
					return protowire.ParseError(n)
				}
				switch num {
				case 1:
					key = x
				case 2:
					str = x
				}
				return nil
			})
			if perr != nil {
				return perr
			}
			if key < uint64(len(strs)) && str < uint64(len(strs)) && strs[key] == p2p.PartLabel {
				part = strs[str]
			}
		}
		return nil
	})
	if len(values) < 2 {
		return "", 0, errors.Join(err, fmt.Errorf("sample with %d values", len(values)))
	}
	return part, values[1], err
}

// protoFields calls f with each field of message b: the bytes of a
// length-delimited field, the varint's own bytes of a varint field.
func protoFields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
			v = b[:max(n, 0)]
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
