package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// locality decides whether an address text lies in a local prefix, by the one rule of
// pipelines/locality.py is_local (the reference; tests/pipelines/test_locality.py holds this code,
// Spark's jobs/common.py add_local_flag and DuckDB's pipelines/duck.py equal to it):
//   - the text is lower-cased and trimmed of spaces;
//   - ::ffff:a.b.c.d is the IPv4 address a.b.c.d, and so is its hex form ::ffff:a01:203;
//   - IPv4: four dot-separated integers 0-255 (leading zeros and signs as Spark's cast
//     to long reads them);
//   - IPv6: hex groups of 1-4 digits, eight in all or fewer around one ::;
//   - anything else is not local.
type locality struct {
	v4 [][2]uint32 // first and last address of each IPv4 prefix
	v6 []netip.Prefix
}

func newLocality(list string) (*locality, error) {
	l := &locality{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("-local %q: %w", s, err)
		}
		p = p.Masked()
		if p.Addr().Is4() {
			first := ipv4(p.Addr())
			l.v4 = append(l.v4, [2]uint32{first, first | uint32(uint64(1)<<(32-p.Bits())-1)})
		} else {
			l.v6 = append(l.v6, p)
		}
	}
	return l, nil
}

func ipv4(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// v6Text is IPv6 text: eight groups, or fewer around one :: (at most seven, checked
// after the split).
var v6Text = regexp.MustCompile(`^(([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}|(([0-9a-f]{1,4}:)*[0-9a-f]{1,4})?::(([0-9a-f]{1,4}:)*[0-9a-f]{1,4})?)$`)

func (l *locality) isLocal(text string) bool {
	a := strings.ToLower(strings.Trim(text, " "))
	t := a
	if strings.HasPrefix(a, "::ffff:") && strings.Contains(a, ".") {
		t = a[strings.LastIndex(a, ":")+1:]
	}
	if !strings.Contains(t, ":") {
		ip, ok := sparkIPv4(t)
		return ok && l.v4Local(ip)
	}
	if !v6Text.MatchString(a) {
		return false
	}
	groups, ok := sparkIPv6Groups(a)
	if !ok {
		return false
	}
	if groups == [8]int{0, 0, 0, 0, 0, 0xffff, groups[6], groups[7]} { // ::ffff:a01:203: IPv4
		return l.v4Local(uint32(groups[6])<<16 | uint32(groups[7]))
	}
	for _, p := range l.v6 {
		if groupsIn(groups, p) {
			return true
		}
	}
	return false
}

func (l *locality) v4Local(ip uint32) bool {
	for _, r := range l.v4 {
		if ip >= r[0] && ip <= r[1] {
			return true
		}
	}
	return false
}

// sparkIPv4 parses a.b.c.d as Spark's split + try_cast(long) does.
func sparkIPv4(t string) (uint32, bool) {
	parts := strings.Split(t, ".")
	if len(parts) != 4 {
		return 0, false
	}
	var ip uint32
	for _, p := range parts {
		v, err := strconv.ParseInt(strings.TrimFunc(p, func(r rune) bool { return r <= ' ' }), 10, 64)
		if err != nil || v < 0 || v > 255 {
			return 0, false
		}
		ip = ip<<8 | uint32(v)
	}
	return ip, true
}

// sparkIPv6Groups expands a (already checked to be hex digits and colons) into its eight
// groups; -1 marks an empty group, which never matches.
func sparkIPv6Groups(a string) ([8]int, bool) {
	var g [8]int
	var parts []string
	if h := strings.SplitN(a, "::", 2); len(h) == 2 {
		left, right := splitNonEmpty(h[0]), splitNonEmpty(h[1])
		if len(left)+len(right) > 7 { // :: stands for at least one group
			return g, false
		}
		parts = append(append(left, zeros(8-len(left)-len(right))...), right...)
	} else {
		parts = strings.Split(a, ":")
	}
	if len(parts) != 8 {
		return g, false
	}
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 16, 32)
		if err != nil {
			v = -1
		}
		g[i] = int(v)
	}
	return g, true
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ":")
}

func zeros(n int) []string {
	z := make([]string, max(n, 0))
	for i := range z {
		z[i] = "0"
	}
	return z
}

func groupsIn(g [8]int, p netip.Prefix) bool {
	b := p.Addr().As16()
	bits := p.Bits()
	for i := 0; i*16 < bits; i++ {
		want := int(b[2*i])<<8 | int(b[2*i+1])
		if rem := bits - i*16; rem < 16 {
			if g[i] < 0 || g[i]>>(16-rem) != want>>(16-rem) {
				return false
			}
		} else if g[i] != want {
			return false
		}
	}
	return true
}

// classifyLines is -classify: the locality of each address text read from in (one JSON
// string a line; null stands for a null address, which the kernel reads as ""), as 1 or 0
// a line. tests/pipelines/test_locality.py holds it equal to pipelines/locality.py is_local.
func classifyLines(prefixes string, in io.Reader, out io.Writer) error {
	l, err := newLocality(prefixes)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	w := bufio.NewWriter(out)
	for sc.Scan() {
		var text *string
		if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
			return fmt.Errorf("-classify: line %q: %w", sc.Text(), err)
		}
		answer := "0"
		if text != nil && l.isLocal(*text) {
			answer = "1"
		}
		fmt.Fprintln(w, answer)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return w.Flush()
}
