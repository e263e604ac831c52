package main

import "errors"

// LZO1X decompression (the format of nfcapd -z, written by minilzo's lzo1x_1).
// Follows the reference lzo1x_decompress_safe: every read and back-reference is
// bounds-checked, so garbage input yields an error, never a panic.

var (
	errLZOInput   = errors.New("lzo: input overrun")
	errLZOOutput  = errors.New("lzo: output exceeds limit")
	errLZOLookbeh = errors.New("lzo: lookbehind overrun")
	errLZOEnd     = errors.New("lzo: no end-of-stream marker")
)

func lzo1xDecompress(in []byte, out []byte, limit int) ([]byte, error) {
	ip := 0
	var t, next int
	state := 0
	need := func(n int) bool { return ip+n <= len(in) }
	copyLit := func(n int) error {
		if !need(n) {
			return errLZOInput
		}
		if len(out)+n > limit {
			return errLZOOutput
		}
		out = append(out, in[ip:ip+n]...)
		ip += n
		return nil
	}
	// zero-run length extension: each 0 byte adds 255, then a final byte.
	zeros := func() (int, error) {
		n := 0
		for {
			if !need(1) {
				return 0, errLZOInput
			}
			if in[ip] != 0 {
				break
			}
			n += 255
			ip++
			if n > limit {
				return 0, errLZOOutput
			}
		}
		v := n + int(in[ip])
		ip++
		return v, nil
	}

	if !need(1) {
		return out, errLZOInput
	}
	if in[0] > 17 {
		t = int(in[0]) - 17
		ip++
		if t < 4 {
			next = t
			if err := copyLit(next); err != nil {
				return out, err
			}
			state = next
		} else {
			if err := copyLit(t); err != nil {
				return out, err
			}
			state = 4
		}
	}
	for {
		if !need(1) {
			return out, errLZOEnd
		}
		t = int(in[ip])
		ip++
		var mpos int
		if t < 16 {
			if state == 0 {
				if t == 0 {
					z, err := zeros()
					if err != nil {
						return out, err
					}
					t = z + 15
				}
				if err := copyLit(t + 3); err != nil {
					return out, err
				}
				state = 4
				continue
			} else if state != 4 {
				next = t & 3
				if !need(1) {
					return out, errLZOInput
				}
				mpos = len(out) - 1 - (t >> 2) - (int(in[ip]) << 2)
				ip++
				t = 2
			} else {
				next = t & 3
				if !need(1) {
					return out, errLZOInput
				}
				mpos = len(out) - (1 + 0x0800) - (t >> 2) - (int(in[ip]) << 2)
				ip++
				t = 3
			}
		} else if t >= 64 {
			next = t & 3
			if !need(1) {
				return out, errLZOInput
			}
			mpos = len(out) - 1 - ((t >> 2) & 7) - (int(in[ip]) << 3)
			ip++
			t = (t >> 5) + 1
		} else if t >= 32 {
			t = (t & 31) + 2
			if t == 2 {
				z, err := zeros()
				if err != nil {
					return out, err
				}
				t += z + 31
			}
			if !need(2) {
				return out, errLZOInput
			}
			v := int(in[ip]) | int(in[ip+1])<<8
			ip += 2
			mpos = len(out) - 1 - (v >> 2)
			next = v & 3
		} else {
			mpos = len(out) - ((t & 8) << 11)
			t = (t & 7) + 2
			if t == 2 {
				z, err := zeros()
				if err != nil {
					return out, err
				}
				t += z + 7
			}
			if !need(2) {
				return out, errLZOInput
			}
			v := int(in[ip]) | int(in[ip+1])<<8
			ip += 2
			mpos -= v >> 2
			next = v & 3
			if mpos == len(out) {
				if ip != len(in) {
					return out, errors.New("lzo: trailing bytes after end-of-stream marker")
				}
				return out, nil
			}
			mpos -= 0x4000
		}
		if mpos < 0 || mpos >= len(out) {
			return out, errLZOLookbeh
		}
		if len(out)+t > limit {
			return out, errLZOOutput
		}
		for i := 0; i < t; i++ { // byte by byte: source and destination may overlap
			out = append(out, out[mpos+i])
		}
		state = next
		if err := copyLit(next); err != nil {
			return out, err
		}
	}
}
