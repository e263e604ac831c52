package main

// appendIPv4 writes dotted quad text without allocating (digit by digit: strconv's
// copies cost the importer 9 % of its CPU).
func appendIPv4(dst []byte, a []byte) []byte {
	dst = appendOctet(dst, a[0])
	dst = append(dst, '.')
	dst = appendOctet(dst, a[1])
	dst = append(dst, '.')
	dst = appendOctet(dst, a[2])
	dst = append(dst, '.')
	return appendOctet(dst, a[3])
}

func appendOctet(dst []byte, v byte) []byte {
	switch {
	case v >= 100:
		return append(dst, '0'+v/100, '0'+v/10%10, '0'+v%10)
	case v >= 10:
		return append(dst, '0'+v/10, '0'+v%10)
	}
	return append(dst, '0'+v)
}

// appendIPv6 writes RFC 5952 text, the same as Python's ipaddress (for IPv4-mapped
// addresses too: Python 3.11 prints ::ffff:102:304, not ::ffff:1.2.3.4): all eight
// groups in hex, the first longest run of two or more zero groups as "::". Written
// here rather than with net/netip, which took 8 % of the importer's CPU for a fifth of
// the flows (pprof).
func appendIPv6(dst []byte, a *[16]byte) []byte {
	var g [8]uint16
	for i := range g {
		g[i] = uint16(a[2*i])<<8 | uint16(a[2*i+1])
	}
	best, bestLen := -1, 1
	for i := 0; i < 8; {
		if g[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && g[j] == 0 {
			j++
		}
		if j-i > bestLen {
			best, bestLen = i, j-i
		}
		i = j
	}
	for i := 0; i < 8; i++ {
		if i == best {
			dst = append(dst, ':', ':')
			i += bestLen - 1
			continue
		}
		if i > 0 && !(best >= 0 && i == best+bestLen) {
			dst = append(dst, ':')
		}
		dst = appendHex16(dst, g[i])
	}
	return dst
}

const hexDigits = "0123456789abcdef"

func appendHex16(dst []byte, v uint16) []byte {
	switch {
	case v >= 0x1000:
		return append(dst, hexDigits[v>>12], hexDigits[v>>8&0xf], hexDigits[v>>4&0xf], hexDigits[v&0xf])
	case v >= 0x100:
		return append(dst, hexDigits[v>>8], hexDigits[v>>4&0xf], hexDigits[v&0xf])
	case v >= 0x10:
		return append(dst, hexDigits[v>>4], hexDigits[v&0xf])
	}
	return append(dst, hexDigits[v])
}

func appendAddr(dst []byte, a *[16]byte, v6 bool) []byte {
	if v6 {
		return appendIPv6(dst, a)
	}
	return appendIPv4(dst, a[:4])
}
