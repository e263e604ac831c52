package main

// The decoder and the table on crafted bytes: messages built with GoBGP's serialisers
// (the same library that decodes them, so the bytes are well-formed BMP), then cut,
// damaged or given unknown types by hand.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/packet/bmp"
)

const peerA = "192.0.2.11"
const peerB = "192.0.2.12"

func peerHeader(t uint8, flags uint8, addr string, as uint32) bmp.BMPPeerHeader {
	return *bmp.NewBMPPeerHeader(t, flags, 0, addr, as, "10.0.0.1", float64(time.Now().Unix()))
}

func mustSerialize(t *testing.T, m *bmp.BMPMessage) []byte {
	t.Helper()
	b, err := m.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func open(as uint16, id string) *bgp.BGPMessage {
	return bgp.NewBGPOpenMessage(as, 90, id, []bgp.OptionParameterInterface{
		bgp.NewOptionParameterCapability([]bgp.ParameterCapabilityInterface{bgp.NewCapFourOctetASNumber(uint32(as))})})
}

func peerUp(t *testing.T, h bmp.BMPPeerHeader) []byte {
	return mustSerialize(t, bmp.NewBMPPeerUpNotification(h, "192.0.2.1", 179, 40000, open(64512, "10.0.0.2"), open(64501, "10.0.0.1")))
}

func peerDown(t *testing.T, h bmp.BMPPeerHeader) []byte {
	return mustSerialize(t, bmp.NewBMPPeerDownNotification(h, bmp.BMP_PEER_DOWN_REASON_REMOTE_NO_NOTIFICATION, nil, nil))
}

type route struct {
	prefix  string
	asPath  []uint32
	comms   []uint32
	large   []*bgp.LargeCommunity
	nextHop string
}

// update: one UPDATE announcing rs (IPv4 in NLRI, IPv6 in MP_REACH) and withdrawing ws.
func update(rs []route, ws []string) *bgp.BGPMessage {
	var attrs []bgp.PathAttributeInterface
	var nlri []*bgp.IPAddrPrefix
	var withdrawn []*bgp.IPAddrPrefix
	var v6 []bgp.AddrPrefixInterface
	var v6w []bgp.AddrPrefixInterface
	nh6 := ""
	if len(rs) > 0 {
		r := rs[0]
		attrs = append(attrs, bgp.NewPathAttributeOrigin(0),
			bgp.NewPathAttributeAsPath([]bgp.AsPathParamInterface{bgp.NewAs4PathParam(bgp.BGP_ASPATH_ATTR_TYPE_SEQ, r.asPath)}))
		if len(r.comms) > 0 {
			attrs = append(attrs, bgp.NewPathAttributeCommunities(r.comms))
		}
		if len(r.large) > 0 {
			attrs = append(attrs, bgp.NewPathAttributeLargeCommunities(r.large))
		}
	}
	for _, r := range rs {
		p := netip.MustParsePrefix(r.prefix)
		if p.Addr().Is4() {
			nlri = append(nlri, bgp.NewIPAddrPrefix(uint8(p.Bits()), p.Addr().String()))
			attrs = appendOnce(attrs, bgp.NewPathAttributeNextHop(r.nextHop))
		} else {
			v6 = append(v6, bgp.NewIPv6AddrPrefix(uint8(p.Bits()), p.Addr().String()))
			nh6 = r.nextHop
		}
	}
	for _, w := range ws {
		p := netip.MustParsePrefix(w)
		if p.Addr().Is4() {
			withdrawn = append(withdrawn, bgp.NewIPAddrPrefix(uint8(p.Bits()), p.Addr().String()))
		} else {
			v6w = append(v6w, bgp.NewIPv6AddrPrefix(uint8(p.Bits()), p.Addr().String()))
		}
	}
	if len(v6) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeMpReachNLRI(nh6, v6))
	}
	if len(v6w) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeMpUnreachNLRI(v6w))
	}
	return bgp.NewBGPUpdateMessage(withdrawn, attrs, nlri)
}

func appendOnce(attrs []bgp.PathAttributeInterface, a bgp.PathAttributeInterface) []bgp.PathAttributeInterface {
	for _, x := range attrs {
		if x.GetType() == a.GetType() {
			return attrs
		}
	}
	return append(attrs, a)
}

func monitoring(t *testing.T, h bmp.BMPPeerHeader, u *bgp.BGPMessage) []byte {
	return mustSerialize(t, bmp.NewBMPRouteMonitoring(h, u))
}

// feed applies messages to a fresh router the way a session does; the first error.
func feed(c *collector, r *router, msgs ...[]byte) error {
	rd := bytes.NewReader(bytes.Join(msgs, nil))
	for {
		buf, err := readMessage(rd)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		msg, err := decode(buf)
		if err != nil {
			return err
		}
		if err := c.apply(r, msg); err != nil {
			return err
		}
	}
}

func look(t *testing.T, r *router, addr, nh string) Route {
	t.Helper()
	var n netip.Addr
	if nh != "" {
		n = netip.MustParseAddr(nh)
	}
	res, _ := r.lookup(netip.MustParseAddr(addr), n)
	return res
}

func reason(err error) string {
	var se *sessionError
	if errors.As(err, &se) {
		return se.reason
	}
	return ""
}

func TestRoutesWithAttributes(t *testing.T) {
	c, r := newCollector(0, 0), newRouter("198.51.100.1")
	pre := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, 0, peerA, 64501)
	err := feed(c, r, peerUp(t, pre), monitoring(t, pre, update([]route{
		{prefix: "203.0.113.0/24", asPath: []uint32{64501, 64600, 4200000001}, comms: []uint32{65401<<16 | 10, 65401<<16 | 20},
			large: []*bgp.LargeCommunity{bgp.NewLargeCommunity(64501, 1, 2)}, nextHop: "192.0.2.11"},
		{prefix: "203.0.113.128/25", asPath: []uint32{64501, 64600, 4200000001}, nextHop: "192.0.2.11"},
	}, nil)), monitoring(t, pre, update([]route{
		{prefix: "2001:db8:100::/48", asPath: []uint32{64501, 64601}, comms: []uint32{65401<<16 | 30}, nextHop: "2001:db8::11"},
	}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	got := look(t, r, "203.0.113.9", "")
	want := Route{Router: "198.51.100.1", Prefix: "203.0.113.0/24", ASPath: []uint32{64501, 64600, 4200000001},
		Communities: []string{"65401:10", "65401:20"}, LargeCommunities: []string{"64501:1:2"}, NextHop: "192.0.2.11",
		OriginAS: 4200000001, Peer: peerA, PeerAS: 64501, RIB: "pre-policy", Origin: "igp"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lookup 203.0.113.9:\n got %+v\nwant %+v", got, want)
	}
	if got := look(t, r, "203.0.113.200", ""); got.Prefix != "203.0.113.128/25" {
		t.Fatalf("longest prefix: %+v", got)
	}
	if got := look(t, r, "2001:db8:100::5", ""); got.Prefix != "2001:db8:100::/48" || got.NextHop != "2001:db8::11" ||
		got.OriginAS != 64601 || !reflect.DeepEqual(got.Communities, []string{"65401:30"}) {
		t.Fatalf("IPv6: %+v", got)
	}
	if got := look(t, r, "10.1.1.1", ""); got.Prefix != "" || got.ASPath == nil || len(got.ASPath) != 0 {
		t.Fatalf("no route must be explicit and empty: %+v", got)
	}
	if r.v4 != 2 || r.v6 != 1 || r.paths != 3 {
		t.Fatalf("counts v4=%d v6=%d paths=%d", r.v4, r.v6, r.paths)
	}

	// withdraws: IPv4 in the UPDATE's withdrawn routes, IPv6 in MP_UNREACH
	if err := feed(c, r, monitoring(t, pre, update(nil, []string{"203.0.113.128/25", "2001:db8:100::/48"}))); err != nil {
		t.Fatal(err)
	}
	if got := look(t, r, "203.0.113.200", ""); got.Prefix != "203.0.113.0/24" {
		t.Fatalf("after withdraw: %+v", got)
	}
	if got := look(t, r, "2001:db8:100::5", ""); got.Prefix != "" {
		t.Fatalf("after IPv6 withdraw: %+v", got)
	}
	// peer down: every route of the peer goes
	if err := feed(c, r, peerDown(t, pre)); err != nil {
		t.Fatal(err)
	}
	if got := look(t, r, "203.0.113.9", ""); got.Prefix != "" || r.paths != 0 || r.v4 != 0 {
		t.Fatalf("after peer down: %+v paths=%d", got, r.paths)
	}
}

func TestViewsAndBestPath(t *testing.T) {
	c, r := newCollector(0, 0), newRouter("198.51.100.1")
	preA := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, 0, peerA, 64501)
	preB := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, 0, peerB, 64502)
	postA := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, bmp.BMP_PEER_FLAG_POST_POLICY, peerA, 64501)
	err := feed(c, r, peerUp(t, preA), peerUp(t, preB),
		monitoring(t, preA, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64501, 64600, 64700}, nextHop: peerA}}, nil)),
		monitoring(t, preB, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64502, 64700}, nextHop: peerB}}, nil)),
		// a more specific only in pre-policy of A, rejected by policy (no post-policy copy)
		monitoring(t, preA, update([]route{{prefix: "203.0.113.0/25", asPath: []uint32{64501, 64666}, nextHop: peerA}}, nil)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := look(t, r, "203.0.113.9", ""); got.Prefix != "203.0.113.0/25" {
		t.Fatalf("pre-policy only: the longest prefix: %+v", got)
	}
	if got := look(t, r, "203.0.113.200", ""); got.Peer != peerB {
		t.Fatalf("best path (shorter AS path) is B's: %+v", got)
	}
	if got := look(t, r, "203.0.113.200", peerA); got.Peer != peerA || got.NextHop != peerA {
		t.Fatalf("the flow's next hop picks A's path: %+v", got)
	}
	// post-policy present: lookups use that view only (the /25 was rejected by policy)
	if err := feed(c, r, monitoring(t, postA, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64501, 64600, 64700}, nextHop: peerA}}, nil))); err != nil {
		t.Fatal(err)
	}
	if got := look(t, r, "203.0.113.9", ""); got.Prefix != "203.0.113.0/24" || got.RIB != "post-policy" || got.Peer != peerA {
		t.Fatalf("post-policy view: %+v", got)
	}
	// Loc-RIB without any Peer Up (RFC 9069, as gobgpd sends it): accepted, and preferred
	loc := peerHeader(bmp.BMP_PEER_TYPE_LOCAL_RIB, 0, "0.0.0.0", 64512)
	if err := feed(c, r, monitoring(t, loc, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64502, 64700},
		comms: []uint32{65401<<16 | 99}, nextHop: peerB}}, nil))); err != nil {
		t.Fatal(err)
	}
	got := look(t, r, "203.0.113.9", "")
	if got.RIB != "loc-rib" || got.NextHop != peerB || !reflect.DeepEqual(got.Communities, []string{"65401:99"}) || got.Peer != "" {
		t.Fatalf("loc-rib view: %+v", got)
	}
	// a second Peer Up of A (its session restarted): A's old routes are stale and go
	if err := feed(c, r, peerUp(t, preA)); err != nil {
		t.Fatal(err)
	}
	if r.views[ribPrePolicy] != 1 || r.views[ribPostPolicy] != 0 || r.views[ribLocRIB] != 1 {
		t.Fatalf("views after A's new Peer Up: %v", r.views)
	}
	// replacing a path keeps one path per peer and view
	for i := 0; i < 3; i++ {
		if err := feed(c, r, monitoring(t, preB, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64502, uint32(64800 + i)}, nextHop: peerB}}, nil))); err != nil {
			t.Fatal(err)
		}
	}
	if r.paths != 2 {
		t.Fatalf("paths after re-announcing: %d", r.paths)
	}
}

func TestAS4PathMerge(t *testing.T) {
	if got := mergeAS4([]uint32{64501, asTrans, asTrans}, []uint32{4200000001, 4200000002}); !reflect.DeepEqual(got, []uint32{64501, 4200000001, 4200000002}) {
		t.Fatalf("merge: %v", got)
	}
	if got := mergeAS4([]uint32{64501}, []uint32{1, 2}); !reflect.DeepEqual(got, []uint32{64501}) {
		t.Fatalf("an AS4_PATH longer than AS_PATH is ignored: %v", got)
	}
}

func TestMaxRoutes(t *testing.T) {
	c, r := newCollector(2, time.Minute), newRouter("198.51.100.1")
	pre := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, 0, peerA, 64501)
	err := feed(c, r, monitoring(t, pre, update([]route{
		{prefix: "203.0.113.0/24", asPath: []uint32{64501}, nextHop: peerA},
		{prefix: "203.0.114.0/24", asPath: []uint32{64501}, nextHop: peerA},
		{prefix: "203.0.115.0/24", asPath: []uint32{64501}, nextHop: peerA},
	}, nil)))
	if reason(err) != reasonMaxRoutes {
		t.Fatalf("3 routes over max 2: %v", err)
	}
}

func TestFramingErrors(t *testing.T) {
	pre := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, 0, peerA, 64501)
	good := monitoring(t, pre, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64501}, nextHop: peerA}}, nil))
	// every cut of a good message inside it is "truncated", never a panic or a silent skip
	for cut := 1; cut < len(good); cut++ {
		_, err := readMessage(bytes.NewReader(good[:cut]))
		if reason(err) != reasonTruncated {
			t.Fatalf("cut at %d of %d: %v", cut, len(good), err)
		}
	}
	if _, err := readMessage(bytes.NewReader(nil)); !errors.Is(err, io.EOF) {
		t.Fatalf("nothing: %v", err)
	}
	bad := func(mut func([]byte)) error {
		b := append([]byte{}, good...)
		mut(b)
		_, err := readMessage(bytes.NewReader(b))
		if err == nil {
			_, err = decode(b)
		}
		return err
	}
	cases := []struct {
		name, want string
		mut        func([]byte)
	}{
		{"version 2", reasonBadVersion, func(b []byte) { b[0] = 2 }},
		{"type 9", reasonUnknownType, func(b []byte) { b[5] = 9 }},
		{"type 255", reasonUnknownType, func(b []byte) { b[5] = 255 }},
		{"length 2^31", reasonTooLong, func(b []byte) { binary.BigEndian.PutUint32(b[1:5], 1<<31) }},
		{"length below the peer header", reasonMalformed, func(b []byte) { binary.BigEndian.PutUint32(b[1:5], 20) }},
		// the BGP message inside: a bad marker, and a length beyond the BMP message
		{"BGP marker", reasonMalformed, func(b []byte) { b[peerHeaderBytes] = 0 }},
		{"BGP length", reasonMalformed, func(b []byte) { binary.BigEndian.PutUint16(b[peerHeaderBytes+16:], 4000) }},
		{"BGP type OPEN in route monitoring", reasonMalformed, func(b []byte) { b[peerHeaderBytes+18] = 1 }},
	}
	for _, tc := range cases {
		err := bad(tc.mut)
		if reason(err) != tc.want {
			t.Errorf("%s: want %s, got %v", tc.name, tc.want, err)
		}
	}
	// an OPEN inside a Route Monitoring decodes as BGP but is not an UPDATE: apply refuses it
	b := append([]byte{}, good...)
	b[peerHeaderBytes+18] = 1
	if msg, err := decode(b); err == nil {
		if err := newCollector(0, 0).apply(newRouter("x"), msg); reason(err) != reasonMalformed {
			t.Errorf("OPEN in route monitoring: %v", err)
		}
	}
}

// TestSessions: real TCP sessions on loopback; a session sending garbage is reset and
// counted, another router's table is untouched; a router that closes loses its routes.
func TestSessions(t *testing.T) {
	c := newCollector(0, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go c.serve(conn)
		}
	}()
	dial := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		conn, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Skipf("cannot dial from %s (loopback aliases): %v", src, err)
		}
		return conn
	}
	pre := peerHeader(bmp.BMP_PEER_TYPE_GLOBAL, 0, peerA, 64501)
	msg := monitoring(t, pre, update([]route{{prefix: "203.0.113.0/24", asPath: []uint32{64501, 64600}, nextHop: peerA}}, nil))
	good := dial("127.0.0.1")
	defer good.Close()
	if _, err := good.Write(append(peerUp(t, pre), msg...)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "router 127.0.0.1's route", func() bool {
		res, _ := c.lookup(query{Addr: "203.0.113.1", Exporter: "127.0.0.1"})
		return res.Prefix == "203.0.113.0/24"
	})
	for i, garbage := range [][]byte{
		{3, 0, 0, 0, 6, 42},                            // unknown type 42
		append(msg[:len(msg)-1:len(msg)-1], 0xff)[:30], // truncated: the connection closes 30 bytes in
	} {
		src := []string{"127.0.0.2", "127.0.0.3"}[i]
		bad := dial(src)
		if _, err := bad.Write(append(append([]byte{}, msg...), garbage...)); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			bad.(*net.TCPConn).CloseWrite()
		}
		want := []string{reasonUnknownType, reasonTruncated}[i]
		waitFor(t, want+" counted", func() bool {
			c.mu.RLock()
			defer c.mu.RUnlock()
			return c.resets[want] == 1
		})
		bad.Close()
		c.mu.RLock()
		r := c.routers[src]
		c.mu.RUnlock()
		r.mu.RLock()
		if r.up || r.paths != 0 || r.resets[want] != 1 || r.lastError == "" {
			t.Errorf("router %s after %s: up=%v paths=%d resets=%v", src, want, r.up, r.paths, r.resets)
		}
		r.mu.RUnlock()
	}
	res, _ := c.lookup(query{Addr: "203.0.113.1", Exporter: "127.0.0.1"})
	if res.Prefix != "203.0.113.0/24" || res.Router != "127.0.0.1" {
		t.Fatalf("the good router's table after the others' resets: %+v", res)
	}
	// the compact batch: each distinct route once, an index per address
	batch, err := c.lookupBatch("127.0.0.1", []string{"203.0.113.1", "10.0.0.1", "203.0.113.200", "::ffff:203.0.113.7"})
	if err != nil || batch.Router != "127.0.0.1" || len(batch.Routes) != 1 || batch.Routes[0].Prefix != "203.0.113.0/24" ||
		!reflect.DeepEqual(batch.Index, []int{0, -1, 0, 0}) {
		t.Fatalf("lookup_batch: %+v %v", batch, err)
	}
	if _, err := c.lookupBatch("127.0.0.1", []string{"203.0.113.1", "nope"}); err == nil {
		t.Fatal("lookup_batch of a bad address: no error")
	}
	// one router left with a session: every exporter uses its table
	if res, _ := c.lookup(query{Addr: "203.0.113.1", Exporter: "192.0.2.99"}); res.Router != "127.0.0.1" {
		t.Fatalf("single router for an unknown exporter: %+v", res)
	}
	// a router that opens a new session while its old one looks open: the old one is closed,
	// the table is the new session's alone
	first := dial("127.0.0.4")
	defer first.Close()
	first.Write(append(peerUp(t, pre), msg...))
	waitFor(t, "127.0.0.4's first session", func() bool {
		res, _ := c.lookup(query{Addr: "203.0.113.1", Exporter: "127.0.0.4"})
		return res.Router == "127.0.0.4" && res.Prefix == "203.0.113.0/24"
	})
	second := dial("127.0.0.4")
	defer second.Close()
	second.Write(append(peerUp(t, pre), monitoring(t, pre, update([]route{{prefix: "198.51.100.0/24",
		asPath: []uint32{64501}, nextHop: peerA}}, nil))...))
	waitFor(t, "127.0.0.4's second session to own its table", func() bool {
		a, _ := c.lookup(query{Addr: "198.51.100.1", Exporter: "127.0.0.4"})
		b, _ := c.lookup(query{Addr: "203.0.113.1", Exporter: "127.0.0.4"})
		return a.Prefix == "198.51.100.0/24" && b.Prefix == ""
	})
	c.mu.RLock()
	replaced := c.resets[reasonReplaced]
	c.mu.RUnlock()
	if replaced != 1 {
		t.Fatalf("replaced sessions: %d", replaced)
	}
	second.Close()
	good.Close()
	waitFor(t, "the closed session's routes to go", func() bool {
		res, _ := c.lookup(query{Addr: "203.0.113.1", Exporter: "127.0.0.1"})
		return res.Prefix == ""
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
