package main

// One routing table per router (a BMP session, named by its source address): every path
// the router reported (per peer and RIB view) in a longest-prefix-match table (bart).
//
// Memory: a path is 16 bytes (peer index + a handle to interned attributes); attribute
// sets are interned with Go's `unique` package, so the many routes sharing an AS path and
// communities share one copy, freed by the GC when the last route using it goes.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/gaissmai/bart"
)

// RIB views, in increasing preference: a lookup uses the best view the router sends.
const (
	ribPrePolicy  uint8 = 0 // Adj-RIB-In before the router's import policy (RFC 7854)
	ribPostPolicy uint8 = 1 // Adj-RIB-In after it
	ribLocRIB     uint8 = 2 // the router's selected routes (RFC 9069)
	ribViews            = 3
)

var ribNames = [ribViews]string{"pre-policy", "post-policy", "loc-rib"}

// attrs is one route's attributes; comparable, so `unique` can intern it.
type attrs struct {
	asPath      string // AS numbers, 4 bytes each, big endian, neighbour first (sets flattened in order)
	communities string // 4 bytes each
	large       string // 12 bytes each
	nextHop     netip.Addr
	origin      uint8
	localPref   uint32
	med         uint32
}

type path struct {
	peer  uint32 // index into router.peers
	attrs unique.Handle[attrs]
}

type peerKey struct {
	dist uint64
	addr netip.Addr
	rib  uint8
}

type peerInfo struct {
	key   peerKey
	as    uint32
	bgpID netip.Addr
	up    bool
	paths int
}

// router is one BMP session's table. The session goroutine writes (mu), lookups read.
type router struct {
	mu      sync.RWMutex
	addr    string
	table   bart.Table[[]path]
	peers   []*peerInfo
	peerIdx map[peerKey]uint32
	views   [ribViews]int // paths per RIB view
	paths   int
	v4, v6  int // prefixes per address family

	// session facts (read by status under mu)
	session     uint64 // the generation of the session that owns the table now
	connected   time.Time
	closed      time.Time
	up          bool
	sysName     string
	sysDescr    string
	messages    uint64
	lastUpdate  time.Time
	lastError   string
	resets      map[string]uint64
	sessions    uint64
	ignoredMsgs uint64
}

func newRouter(addr string) *router {
	return &router{addr: addr, peerIdx: map[peerKey]uint32{}, resets: map[string]uint64{}}
}

// clear drops every route and peer (the session ended: its view is gone).
func (r *router) clear() {
	r.table = bart.Table[[]path]{}
	r.peers = nil
	r.peerIdx = map[peerKey]uint32{}
	r.views = [ribViews]int{}
	r.paths, r.v4, r.v6 = 0, 0, 0
}

func (r *router) peer(k peerKey) uint32 {
	if i, ok := r.peerIdx[k]; ok {
		return i
	}
	i := uint32(len(r.peers))
	r.peers = append(r.peers, &peerInfo{key: k})
	r.peerIdx[k] = i
	return i
}

func (r *router) countPrefix(p netip.Prefix, delta int) {
	if p.Addr().Is4() {
		r.v4 += delta
	} else {
		r.v6 += delta
	}
}

// announce sets peer's path for prefix p (replacing the peer's previous one).
func (r *router) announce(p netip.Prefix, peer uint32, a unique.Handle[attrs]) {
	old, ok := r.table.Get(p)
	for i := range old {
		if old[i].peer == peer {
			old[i].attrs = a // in place: the slice in the table is this one
			return
		}
	}
	if !ok {
		r.countPrefix(p, 1)
	}
	r.table.Insert(p, append(old, path{peer: peer, attrs: a}))
	r.paths++
	r.peers[peer].paths++
	r.views[r.peers[peer].key.rib]++
}

// withdraw removes peer's path for p; whether there was one.
func (r *router) withdraw(p netip.Prefix, peer uint32) bool {
	old, ok := r.table.Get(p)
	if !ok {
		return false
	}
	for i := range old {
		if old[i].peer == peer {
			r.removeAt(p, old, i)
			return true
		}
	}
	return false
}

func (r *router) removeAt(p netip.Prefix, old []path, i int) {
	pi := r.peers[old[i].peer]
	pi.paths--
	r.views[pi.key.rib]--
	r.paths--
	if len(old) == 1 {
		r.table.Delete(p)
		r.countPrefix(p, -1)
		return
	}
	rest := make([]path, 0, len(old)-1)
	rest = append(rest, old[:i]...)
	rest = append(rest, old[i+1:]...)
	r.table.Insert(p, rest)
}

// dropPeers removes every path of the peers for which match is true (Peer Down, or a
// Peer Up of a peer already up: its old routes are stale). Returns the paths removed.
func (r *router) dropPeers(match func(*peerInfo) bool) int {
	gone := map[uint32]bool{}
	for i, pi := range r.peers {
		if match(pi) && pi.paths > 0 {
			gone[uint32(i)] = true
		}
	}
	if len(gone) == 0 {
		return 0
	}
	var prefixes []netip.Prefix
	for p, ps := range r.table.All() {
		for _, x := range ps {
			if gone[x.peer] {
				prefixes = append(prefixes, p)
				break
			}
		}
	}
	removed := 0
	for _, p := range prefixes {
		ps, _ := r.table.Get(p)
		keep := make([]path, 0, len(ps))
		for _, x := range ps {
			if gone[x.peer] {
				pi := r.peers[x.peer]
				pi.paths--
				r.views[pi.key.rib]--
				r.paths--
				removed++
			} else {
				keep = append(keep, x)
			}
		}
		if len(keep) == 0 {
			r.table.Delete(p)
			r.countPrefix(p, -1)
		} else {
			r.table.Insert(p, keep)
		}
	}
	return removed
}

// bestView: the most selected RIB view the router sends (Loc-RIB > post > pre-policy).
func (r *router) bestView() (uint8, bool) {
	for v := int(ribViews) - 1; v >= 0; v-- {
		if r.views[v] > 0 {
			return uint8(v), true
		}
	}
	return 0, false
}

// Route is what a lookup answers (JSON on the API).
type Route struct {
	Router           string   `json:"router"`
	Prefix           string   `json:"prefix"`
	ASPath           []uint32 `json:"as_path"`
	Communities      []string `json:"communities"`
	LargeCommunities []string `json:"large_communities"`
	NextHop          string   `json:"next_hop"`
	OriginAS         uint32   `json:"origin_as"`
	Peer             string   `json:"peer,omitempty"`
	PeerAS           uint32   `json:"peer_as,omitempty"`
	RIB              string   `json:"rib,omitempty"`
	LocalPref        uint32   `json:"local_pref,omitempty"`
	MED              uint32   `json:"med,omitempty"`
	Origin           string   `json:"origin,omitempty"`
}

// unknownRoute: nothing matched; every field explicit and empty.
func unknownRoute(router string) Route {
	return Route{Router: router, ASPath: []uint32{}, Communities: []string{}, LargeCommunities: []string{}}
}

// better: whether path a is preferred over b (both in the same view): BGP's order where
// BMP shows it (local preference, AS path length, origin, MED), then the lower peer.
func (r *router) better(a, b path) bool {
	x, y := a.attrs.Value(), b.attrs.Value()
	if x.localPref != y.localPref {
		return x.localPref > y.localPref
	}
	if len(x.asPath) != len(y.asPath) {
		return len(x.asPath) < len(y.asPath)
	}
	if x.origin != y.origin {
		return x.origin < y.origin
	}
	if x.med != y.med {
		return x.med < y.med
	}
	pa, pb := r.peers[a.peer].key.addr, r.peers[b.peer].key.addr
	if c := pa.Compare(pb); c != 0 {
		return c < 0
	}
	return a.peer < b.peer
}

// lookup: the longest prefix covering addr that has a path in the router's best view; of
// its paths, the one whose next hop is nextHop (when given and present), else the best.
// Caller holds r.mu (read).
func (r *router) lookup(addr, nextHop netip.Addr) (Route, bool) {
	p, x, ok := r.match(addr, nextHop)
	if !ok {
		return unknownRoute(r.addr), false
	}
	return r.route(p, x), true
}

// match is lookup's work: the prefix and the path.
func (r *router) match(addr, nextHop netip.Addr) (netip.Prefix, path, bool) {
	view, ok := r.bestView()
	if !ok {
		return netip.Prefix{}, path{}, false
	}
	bits := 32
	if addr.Is6() {
		bits = 128
	}
	for p, ps := range r.table.Supernets(netip.PrefixFrom(addr, bits)) {
		best, found, nhMatch := path{}, false, false
		for _, x := range ps {
			if r.peers[x.peer].key.rib != view {
				continue
			}
			m := nextHop.IsValid() && x.attrs.Value().nextHop == nextHop
			switch {
			case !found:
				best, found, nhMatch = x, true, m
			case m && !nhMatch:
				best, nhMatch = x, true
			case m == nhMatch && r.better(x, best):
				best = x
			}
		}
		if found {
			return p, best, true
		}
	}
	return netip.Prefix{}, path{}, false
}

func (r *router) route(p netip.Prefix, x path) Route {
	a := x.attrs.Value()
	pi := r.peers[x.peer]
	out := Route{Router: r.addr, Prefix: p.String(), ASPath: asPathOf(a), Communities: communitiesOf(a),
		LargeCommunities: largeOf(a), PeerAS: pi.as, RIB: ribNames[pi.key.rib], LocalPref: a.localPref, MED: a.med,
		Origin: [...]string{"igp", "egp", "incomplete"}[min(int(a.origin), 2)]}
	if a.nextHop.IsValid() {
		out.NextHop = a.nextHop.String()
	}
	if pi.key.addr.IsValid() && !pi.key.addr.IsUnspecified() {
		out.Peer = pi.key.addr.String()
	}
	if n := len(out.ASPath); n > 0 {
		out.OriginAS = out.ASPath[n-1]
	} else {
		out.OriginAS = pi.as // a route of the peer's (or, in the Loc-RIB, the router's) own AS
	}
	return out
}

func asPathOf(a attrs) []uint32 {
	out := make([]uint32, 0, len(a.asPath)/4)
	for i := 0; i+4 <= len(a.asPath); i += 4 {
		out = append(out, binary.BigEndian.Uint32([]byte(a.asPath[i:i+4])))
	}
	return out
}

func communitiesOf(a attrs) []string {
	out := make([]string, 0, len(a.communities)/4)
	for i := 0; i+4 <= len(a.communities); i += 4 {
		v := binary.BigEndian.Uint32([]byte(a.communities[i : i+4]))
		out = append(out, fmt.Sprintf("%d:%d", v>>16, v&0xffff))
	}
	return out
}

func largeOf(a attrs) []string {
	out := make([]string, 0, len(a.large)/12)
	for i := 0; i+12 <= len(a.large); i += 12 {
		b := []byte(a.large[i : i+12])
		out = append(out, fmt.Sprintf("%d:%d:%d", binary.BigEndian.Uint32(b[0:4]),
			binary.BigEndian.Uint32(b[4:8]), binary.BigEndian.Uint32(b[8:12])))
	}
	return out
}

// DumpedPath is one path of a router's table (the `dump` request: tests compare it).
type DumpedPath struct {
	Prefix           string   `json:"prefix"`
	Peer             string   `json:"peer"`
	PeerAS           uint32   `json:"peer_as"`
	RIB              string   `json:"rib"`
	ASPath           []uint32 `json:"as_path"`
	Communities      []string `json:"communities"`
	LargeCommunities []string `json:"large_communities"`
	NextHop          string   `json:"next_hop"`
}

func (r *router) dump() []DumpedPath {
	out := []DumpedPath{}
	for p, ps := range r.table.AllSorted() {
		for _, x := range ps {
			a := x.attrs.Value()
			pi := r.peers[x.peer]
			d := DumpedPath{Prefix: p.String(), Peer: pi.key.addr.String(), PeerAS: pi.as, RIB: ribNames[pi.key.rib],
				ASPath: asPathOf(a), Communities: communitiesOf(a), LargeCommunities: largeOf(a)}
			if a.nextHop.IsValid() {
				d.NextHop = a.nextHop.String()
			}
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Prefix != out[j].Prefix {
			return out[i].Prefix < out[j].Prefix
		}
		return out[i].Peer+out[i].RIB < out[j].Peer+out[j].RIB
	})
	return out
}

// formatASPath is for logs: "64501 64600".
func formatASPath(p []uint32) string {
	s := make([]string, len(p))
	for i, a := range p {
		s[i] = strconv.FormatUint(uint64(a), 10)
	}
	return strings.Join(s, " ")
}
