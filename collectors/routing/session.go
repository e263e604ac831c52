package main

// BMP sessions: framing, decoding (GoBGP's packet/bmp and packet/bgp) and applying each
// message to the session's router table. Anything the collector cannot read resets that
// session only: the reason is logged and counted, every other router goes on.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"
	"unique"

	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/packet/bmp"
)

const (
	maxMessageBytes = 1 << 20 // a BMP message longer than this is refused (a BGP message is at most 64 KiB)
	peerHeaderBytes = bmp.BMP_HEADER_SIZE + bmp.BMP_PEER_HEADER_SIZE
	asTrans         = 23456
)

// Reasons a session is reset (status counts them by these names).
const (
	reasonTruncated   = "truncated"    // the connection ended inside a message
	reasonMalformed   = "malformed"    // a message GoBGP's decoder (or our checks) refused
	reasonUnknownType = "unknown_type" // a BMP message type RFC 7854 does not define
	reasonBadVersion  = "bad_version"  // not BMP version 3
	reasonTooLong     = "too_long"     // a length over maxMessageBytes
	reasonMaxRoutes   = "max_routes"   // more paths than --max-routes
	reasonReplaced    = "replaced"     // the router opened a new session: the old one is closed
	reasonReadError   = "read_error"   // a socket error
)

type sessionError struct {
	reason string
	detail string
}

func (e *sessionError) Error() string { return e.reason + ": " + e.detail }

func fail(reason, format string, args ...any) error {
	return &sessionError{reason: reason, detail: fmt.Sprintf(format, args...)}
}

// readMessage reads one BMP message (common header + body). io.EOF: the router closed
// the session between messages.
func readMessage(rd io.Reader) ([]byte, error) {
	var hdr [bmp.BMP_HEADER_SIZE]byte
	if n, err := io.ReadFull(rd, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) && n == 0 {
			return nil, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fail(reasonTruncated, "the connection ended %d bytes into a 6-byte BMP header", n)
		}
		return nil, fail(reasonReadError, "%v", err)
	}
	if hdr[0] != bmp.BMP_VERSION {
		return nil, fail(reasonBadVersion, "BMP version %d (only version 3, RFC 7854, is spoken)", hdr[0])
	}
	length := binary.BigEndian.Uint32(hdr[1:5])
	typ := hdr[5]
	if typ > bmp.BMP_MSG_ROUTE_MIRRORING {
		return nil, fail(reasonUnknownType, "BMP message type %d (known: 0-6)", typ)
	}
	if length > maxMessageBytes {
		return nil, fail(reasonTooLong, "BMP message of %d bytes (at most %d)", length, maxMessageBytes)
	}
	min := uint32(bmp.BMP_HEADER_SIZE)
	if typ != bmp.BMP_MSG_INITIATION && typ != bmp.BMP_MSG_TERMINATION {
		min = peerHeaderBytes
	}
	if length < min {
		return nil, fail(reasonMalformed, "BMP message type %d of %d bytes: shorter than its headers (%d)", typ, length, min)
	}
	buf := make([]byte, length)
	copy(buf, hdr[:])
	if n, err := io.ReadFull(rd, buf[bmp.BMP_HEADER_SIZE:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fail(reasonTruncated, "the connection ended %d bytes into a %d-byte BMP message (type %d)",
				bmp.BMP_HEADER_SIZE+n, length, typ)
		}
		return nil, fail(reasonReadError, "%v", err)
	}
	return buf, nil
}

// decode parses one whole BMP message with GoBGP's decoder.
func decode(buf []byte) (*bmp.BMPMessage, error) {
	if buf[5] == bmp.BMP_MSG_ROUTE_MONITORING { // GoBGP does not check the BGP marker
		if len(buf) < peerHeaderBytes+bgp.BGP_HEADER_LENGTH {
			return nil, fail(reasonMalformed, "Route Monitoring of %d bytes: no room for a BGP header", len(buf))
		}
		for _, b := range buf[peerHeaderBytes : peerHeaderBytes+16] {
			if b != 0xff {
				return nil, fail(reasonMalformed, "Route Monitoring: the BGP message's marker is not all ones")
			}
		}
	}
	msg, err := bmp.ParseBMPMessage(buf)
	if err != nil {
		return nil, fail(reasonMalformed, "BMP message type %d (%d bytes): %v", buf[5], len(buf), err)
	}
	return msg, nil
}

// collector: every router's table, the counters, the session bookkeeping.
type collector struct {
	mu        sync.RWMutex
	routers   map[string]*router
	conns     map[string]net.Conn
	gen       map[string]uint64
	heldUntil map[string]time.Time
	resets    map[string]uint64
	refused   uint64
	sessions  uint64
	lookups   uint64
	nextGen   uint64

	maxRoutes  int
	holdDown   time.Duration
	routerFor  map[string]string // exporter -> BMP router ([exporters."A"] bmp_router)
	started    time.Time
	listenAddr string
}

func newCollector(maxRoutes int, holdDown time.Duration) *collector {
	return &collector{routers: map[string]*router{}, conns: map[string]net.Conn{}, gen: map[string]uint64{},
		heldUntil: map[string]time.Time{}, resets: map[string]uint64{}, maxRoutes: maxRoutes, holdDown: holdDown,
		routerFor: map[string]string{}, started: time.Now()}
}

func remoteAddr(conn net.Conn) string {
	if ap, err := netip.ParseAddrPort(conn.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
	return host
}

// attach registers a new session of router addr (closing an older one of the same router)
// and returns the router with a fresh table, and the session's generation.
func (c *collector) attach(addr string, conn net.Conn) (*router, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if until, ok := c.heldUntil[addr]; ok && time.Now().Before(until) {
		c.refused++
		return nil, 0, false
	}
	if old, ok := c.conns[addr]; ok {
		c.resets[reasonReplaced]++
		log.Printf("router %s: a new BMP session replaces the open one (reset: %s)", addr, reasonReplaced)
		old.Close()
	}
	r, ok := c.routers[addr]
	if !ok {
		r = newRouter(addr)
		c.routers[addr] = r
	}
	c.nextGen++
	c.gen[addr] = c.nextGen
	c.conns[addr] = conn
	c.sessions++
	r.mu.Lock()
	r.clear()
	r.session = c.nextGen
	r.up, r.connected, r.closed, r.lastError = true, time.Now(), time.Time{}, ""
	r.sessions++
	r.mu.Unlock()
	return r, c.nextGen, true
}

// detach ends session gen of router r: its routes go, the reason is logged and counted
// (unless a newer session of the router took over: then nothing of this one counts).
func (c *collector) detach(r *router, gen uint64, err error) {
	c.mu.Lock()
	current := c.gen[r.addr] == gen
	if !current {
		c.mu.Unlock()
		return
	}
	delete(c.conns, r.addr)
	var se *sessionError
	if errors.As(err, &se) {
		c.resets[se.reason]++
		if se.reason == reasonMaxRoutes && c.holdDown > 0 {
			c.heldUntil[r.addr] = time.Now().Add(c.holdDown)
		}
		log.Printf("router %s: BMP session reset: %s", r.addr, se.Error())
	} else {
		log.Printf("router %s: BMP session closed by the router (%v): its routes are gone", r.addr, err)
	}
	c.mu.Unlock()
	r.mu.Lock()
	if r.session != gen { // a new session of the router attached in between: its table stays
		r.mu.Unlock()
		return
	}
	r.clear()
	r.up, r.closed = false, time.Now()
	if se != nil {
		r.resets[se.reason]++
		r.lastError = se.Error()
	}
	r.mu.Unlock()
}

// serve runs one BMP session to its end.
func (c *collector) serve(conn net.Conn) {
	defer conn.Close()
	addr := remoteAddr(conn)
	r, gen, ok := c.attach(addr, conn)
	if !ok {
		log.Printf("router %s: BMP session refused: cut off for more than --max-routes=%d paths, held down %s",
			addr, c.maxRoutes, c.holdDown)
		return
	}
	log.Printf("router %s: BMP session up", addr)
	rd := bufio.NewReaderSize(conn, 256<<10)
	var err error
	for {
		var buf []byte
		if buf, err = readMessage(rd); err != nil {
			break
		}
		var msg *bmp.BMPMessage
		if msg, err = decode(buf); err != nil {
			break
		}
		r.mu.Lock()
		if r.session != gen { // a newer session of this router owns the table: this one is over
			r.mu.Unlock()
			break
		}
		err = c.apply(r, msg)
		r.mu.Unlock()
		if err != nil {
			break
		}
	}
	c.detach(r, gen, err)
}

var errTerminated = errors.New("BMP Termination message")

// apply changes router r's table by one message. Caller holds r.mu.
func (c *collector) apply(r *router, msg *bmp.BMPMessage) error {
	r.messages++
	h := msg.PeerHeader
	switch body := msg.Body.(type) {
	case *bmp.BMPInitiation:
		for _, tlv := range body.Info {
			if s, ok := tlv.(*bmp.BMPInfoTLVString); ok {
				switch s.Type {
				case bmp.BMP_INIT_TLV_TYPE_SYS_NAME:
					r.sysName = s.Value
				case bmp.BMP_INIT_TLV_TYPE_SYS_DESCR:
					r.sysDescr = s.Value
				}
			}
		}
	case *bmp.BMPTermination:
		return errTerminated
	case *bmp.BMPPeerUpNotification:
		addr := peerAddr(h)
		r.dropPeers(func(p *peerInfo) bool { return samePeer(p, h, addr) }) // a new session: old routes are stale
		for _, v := range viewsOf(h) {
			pi := r.peers[r.peer(peerKey{h.PeerDistinguisher, addr, v})]
			pi.up, pi.as, pi.bgpID = true, h.PeerAS, bgpID(h)
		}
	case *bmp.BMPPeerDownNotification:
		addr := peerAddr(h)
		r.dropPeers(func(p *peerInfo) bool { return samePeer(p, h, addr) })
		for _, pi := range r.peers {
			if samePeer(pi, h, addr) {
				pi.up = false
			}
		}
	case *bmp.BMPRouteMonitoring:
		r.lastUpdate = time.Now()
		view, ok := viewOf(h)
		if !ok {
			r.ignoredMsgs++
			return nil
		}
		update, ok := body.BGPUpdate.Body.(*bgp.BGPUpdate)
		if !ok {
			return fail(reasonMalformed, "Route Monitoring carries a BGP message of type %d, not an UPDATE",
				body.BGPUpdate.Header.Type)
		}
		pi := r.peer(peerKey{h.PeerDistinguisher, peerAddr(h), view})
		if r.peers[pi].as == 0 {
			r.peers[pi].as, r.peers[pi].bgpID = h.PeerAS, bgpID(h) // Loc-RIB without a Peer Up (RFC 9069)
		}
		if err := c.applyUpdate(r, pi, update); err != nil {
			return err
		}
		if c.maxRoutes > 0 && r.paths > c.maxRoutes {
			return fail(reasonMaxRoutes, "the router sent more than [routing] max_routes_per_router = %d routes "+
				"(paths over all peers and RIB views): session cut off, its table dropped", c.maxRoutes)
		}
	default: // statistics reports, route mirroring: nothing for the table
		r.ignoredMsgs++
	}
	return nil
}

func peerAddr(h bmp.BMPPeerHeader) netip.Addr {
	a, ok := netip.AddrFromSlice(h.PeerAddress)
	if !ok {
		return netip.IPv4Unspecified()
	}
	return a.Unmap()
}

func bgpID(h bmp.BMPPeerHeader) netip.Addr {
	a, _ := netip.AddrFromSlice(h.PeerBGPID)
	return a.Unmap()
}

// viewOf: the RIB view a Route Monitoring message's peer header names; false: a view the
// table does not keep (Adj-RIB-Out, RFC 8671; VPN instance peers).
func viewOf(h bmp.BMPPeerHeader) (uint8, bool) {
	switch h.PeerType {
	case bmp.BMP_PEER_TYPE_LOCAL_RIB:
		return ribLocRIB, true
	case bmp.BMP_PEER_TYPE_GLOBAL, bmp.BMP_PEER_TYPE_LOCAL:
		if h.IsAdjRIBOut() {
			return 0, false
		}
		if h.IsPostPolicy() {
			return ribPostPolicy, true
		}
		return ribPrePolicy, true
	}
	return 0, false
}

// viewsOf: the views a Peer Up/Down concerns (one BGP session's pre- and post-policy
// Adj-RIB-In, or the Loc-RIB instance).
func viewsOf(h bmp.BMPPeerHeader) []uint8 {
	if h.PeerType == bmp.BMP_PEER_TYPE_LOCAL_RIB {
		return []uint8{ribLocRIB}
	}
	return []uint8{ribPrePolicy, ribPostPolicy}
}

func samePeer(p *peerInfo, h bmp.BMPPeerHeader, addr netip.Addr) bool {
	if p.key.dist != h.PeerDistinguisher || p.key.addr != addr {
		return false
	}
	return (p.key.rib == ribLocRIB) == (h.PeerType == bmp.BMP_PEER_TYPE_LOCAL_RIB)
}

// applyUpdate: withdrawals first, then announcements (RFC 4271's order within an UPDATE).
func (c *collector) applyUpdate(r *router, peer uint32, u *bgp.BGPUpdate) error {
	for _, w := range u.WithdrawnRoutes {
		p, err := prefixOf(w.Prefix, w.Length)
		if err != nil {
			return err
		}
		r.withdraw(p, peer)
	}
	var (
		a         attrs
		asPath    []uint32
		as4Path   []uint32
		haveAS4   bool
		mpReach   *bgp.PathAttributeMpReachNLRI
		nextHopV4 netip.Addr
	)
	for _, pa := range u.PathAttributes {
		switch v := pa.(type) {
		case *bgp.PathAttributeMpUnreachNLRI:
			for _, n := range v.Value {
				p, ok, err := unicastPrefix(n)
				if err != nil {
					return err
				}
				if ok {
					r.withdraw(p, peer)
				}
			}
		case *bgp.PathAttributeMpReachNLRI:
			mpReach = v
		case *bgp.PathAttributeOrigin:
			a.origin = v.Value
		case *bgp.PathAttributeAsPath:
			asPath = flattenASPath(v.Value)
		case *bgp.PathAttributeAs4Path:
			haveAS4 = true
			for _, seg := range v.Value {
				if seg.Type == bgp.BGP_ASPATH_ATTR_TYPE_SEQ || seg.Type == bgp.BGP_ASPATH_ATTR_TYPE_SET {
					as4Path = append(as4Path, seg.AS...)
				}
			}
		case *bgp.PathAttributeNextHop:
			nextHopV4, _ = netip.AddrFromSlice(v.Value)
			nextHopV4 = nextHopV4.Unmap()
		case *bgp.PathAttributeMultiExitDisc:
			a.med = v.Value
		case *bgp.PathAttributeLocalPref:
			a.localPref = v.Value
		case *bgp.PathAttributeCommunities:
			b := make([]byte, 0, 4*len(v.Value))
			for _, x := range v.Value {
				b = binary.BigEndian.AppendUint32(b, x)
			}
			a.communities = string(b)
		case *bgp.PathAttributeLargeCommunities:
			b := make([]byte, 0, 12*len(v.Values))
			for _, x := range v.Values {
				b = binary.BigEndian.AppendUint32(b, x.ASN)
				b = binary.BigEndian.AppendUint32(b, x.LocalData1)
				b = binary.BigEndian.AppendUint32(b, x.LocalData2)
			}
			a.large = string(b)
		}
	}
	if haveAS4 {
		asPath = mergeAS4(asPath, as4Path)
	}
	b := make([]byte, 0, 4*len(asPath))
	for _, x := range asPath {
		b = binary.BigEndian.AppendUint32(b, x)
	}
	a.asPath = string(b)
	if len(u.NLRI) > 0 {
		v4 := a
		v4.nextHop = nextHopV4
		h := unique.Make(v4)
		for _, n := range u.NLRI {
			p, err := prefixOf(n.Prefix, n.Length)
			if err != nil {
				return err
			}
			r.announce(p, peer, h)
		}
	}
	if mpReach != nil && len(mpReach.Value) > 0 {
		mp := a
		mp.nextHop, _ = netip.AddrFromSlice(mpReach.Nexthop)
		mp.nextHop = mp.nextHop.Unmap()
		h := unique.Make(mp)
		for _, n := range mpReach.Value {
			p, ok, err := unicastPrefix(n)
			if err != nil {
				return err
			}
			if ok {
				r.announce(p, peer, h)
			}
		}
	}
	return nil
}

// flattenASPath: the AS numbers of AS_SEQUENCE and AS_SET segments, in order (confederation
// segments are the router's own, left out as BGP's path length leaves them out).
func flattenASPath(segs []bgp.AsPathParamInterface) []uint32 {
	var out []uint32
	for _, s := range segs {
		if t := s.GetType(); t == bgp.BGP_ASPATH_ATTR_TYPE_SEQ || t == bgp.BGP_ASPATH_ATTR_TYPE_SET {
			out = append(out, s.GetAS()...)
		}
	}
	return out
}

// mergeAS4: RFC 6793 4.2.3: a 2-byte AS_PATH with AS_TRANS and an AS4_PATH give the path.
func mergeAS4(path, as4 []uint32) []uint32 {
	if len(as4) == 0 || len(as4) > len(path) {
		return path
	}
	out := append([]uint32{}, path[:len(path)-len(as4)]...)
	return append(out, as4...)
}

func prefixOf(ip net.IP, length uint8) (netip.Prefix, error) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Prefix{}, fail(reasonMalformed, "prefix address of %d bytes", len(ip))
	}
	a = a.Unmap()
	p := netip.PrefixFrom(a, int(length))
	if !p.IsValid() {
		return netip.Prefix{}, fail(reasonMalformed, "prefix %s/%d: length beyond the address", a, length)
	}
	return p.Masked(), nil
}

// unicastPrefix: an MP_(UN)REACH NLRI of IPv4/IPv6 unicast; false for other families.
func unicastPrefix(n bgp.AddrPrefixInterface) (netip.Prefix, bool, error) {
	switch v := n.(type) {
	case *bgp.IPAddrPrefix:
		p, err := prefixOf(v.Prefix, v.Length)
		return p, err == nil, err
	case *bgp.IPv6AddrPrefix:
		p, err := prefixOf(v.Prefix, v.Length)
		return p, err == nil, err
	}
	return netip.Prefix{}, false, nil
}

// routerNames: the routers, sorted.
func (c *collector) routerNames() []string {
	names := make([]string, 0, len(c.routers))
	for n := range c.routers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
