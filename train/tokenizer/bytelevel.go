package tokenizer

// byteChar is GPT-2's bytes_to_unicode: every byte as a printable rune, so
// that BPE symbols are strings of visible characters. charByte inverts it.
var byteChar, charByte = byteLevelTables()

func byteLevelTables() ([256]rune, map[rune]byte) {
	var bc [256]rune
	cb := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		visible := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
		r := rune(b)
		if !visible {
			r = rune(256 + n)
			n++
		}
		bc[b] = r
		cb[r] = byte(b)
	}
	return bc, cb
}

// unByteLevel maps a byte-level symbol back to its bytes.
func unByteLevel(sym string) (string, bool) {
	out := make([]byte, 0, len(sym))
	for _, r := range sym {
		b, ok := charByte[r]
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), len(out) > 0
}

// ByteLevel maps bytes to their byte-level symbol string (the inverse of
// unByteLevel), as written in a tokenizer.json vocabulary.
func ByteLevel(raw string) string {
	rs := make([]rune, len(raw))
	for i := 0; i < len(raw); i++ {
		rs[i] = byteChar[raw[i]]
	}
	return string(rs)
}

// ByteChar returns the byte-level symbol of one byte.
func ByteChar(b byte) rune { return byteChar[b] }
