package main

// The local interface: a Unix socket, one JSON request per line, one JSON answer per line;
// a client may keep the connection and send many requests (the ingest will, with batches).
//
//	{"op":"status"}
//	{"op":"lookup","queries":[{"addr":"203.0.113.9","exporter":"192.0.2.1","next_hop":"192.0.2.254"}, ...]}
//	      -> {"results":[{"router":..,"prefix":..,"as_path":[..],"communities":[..],
//	                      "large_communities":[..],"next_hop":..,"origin_as":..}, ...]} (one per query, in order)
//	{"op":"lookup_all","addr":"203.0.113.9"}  -> {"results":[one per router]}
//	{"op":"lookup_batch","exporter":"192.0.2.1","addrs":["203.0.113.9", ...]}
//	      -> {"router":..,"routes":[distinct routes],"index":[per address: its route's place in routes, -1: none]}
//	      (the compact form for many addresses of one exporter: each route once)
//	{"op":"lookup_packed","exporter":"192.0.2.1","offsets":B64,"data":B64}
//	      -> {"router":..,"index":B64,"prefix_offsets":B64,"prefix_data":B64,"attr":B64,
//	          "as_path_offsets":B64,"as_path":B64,"communities_offsets":B64,"community_offsets":B64,
//	          "community_data":B64,"large_offsets":B64,"large_string_offsets":B64,"large_data":B64,
//	          "next_hop_offsets":B64,"next_hop_data":B64,"origin":B64}
//	      (the ingest's form, issue 33's CPU bound: no JSON value per address or per route.
//	      B64 = base64 of little-endian arrays in Arrow's layout: the addresses as a string
//	      column (int32 offsets, n+1, and their text bytes); index int32 per address, its
//	      route's place, -1 none; per distinct route its prefix (a string column) and attr,
//	      int32, its attribute set's place; per distinct attribute set the AS path (int32
//	      list offsets into uint32 AS numbers), communities and large communities (int32 list
//	      offsets into a string column), next hop (a string column) and origin AS (uint32))
//	{"op":"dump","router":"127.0.0.1"}        -> {"paths":[every path of that router's table]}
//	{"op":"gc"}                               -> the status after a garbage collection (bench/routing.py's memory figure)
//
// An unreadable request gets {"error":"..."} and the connection stays usable.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

type query struct {
	Addr     string `json:"addr"`
	Exporter string `json:"exporter"`
	NextHop  string `json:"next_hop"`
}

type request struct {
	Op       string   `json:"op"`
	Queries  []query  `json:"queries"`
	Addr     string   `json:"addr"`
	Addrs    []string `json:"addrs"`
	Exporter string   `json:"exporter"`
	Router   string   `json:"router"`
	Offsets  []byte   `json:"offsets"` // lookup_packed: the addresses as an Arrow string column
	Data     []byte   `json:"data"`
}

func (c *collector) serveAPI(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Printf("api: %v", err)
			return
		}
		go c.apiConn(conn)
	}
}

func (c *collector) apiConn(conn net.Conn) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	w := bufio.NewWriterSize(conn, 256<<10)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		var req request
		var out any
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			out = map[string]string{"error": fmt.Sprintf("request is not JSON: %v", err)}
		} else {
			out = c.answer(req)
		}
		if err := enc.Encode(out); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func (c *collector) answer(req request) any {
	switch req.Op {
	case "status":
		return c.status()
	case "gc":
		debug.FreeOSMemory() // a GC, and memory returned to the OS: the figure repeats
		return c.status()
	case "lookup":
		results := make([]Route, len(req.Queries))
		for i, q := range req.Queries {
			res, err := c.lookup(q)
			if err != nil {
				return map[string]string{"error": fmt.Sprintf("query %d: %v", i, err)}
			}
			results[i] = res
		}
		atomic.AddUint64(&c.lookups, uint64(len(req.Queries)))
		return map[string]any{"results": results}
	case "lookup_batch":
		out, err := c.lookupBatch(req.Exporter, req.Addrs)
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		atomic.AddUint64(&c.lookups, uint64(len(req.Addrs)))
		return out
	case "lookup_packed":
		addrs, err := unpackStrings(req.Offsets, req.Data)
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		out, err := c.lookupPacked(req.Exporter, addrs)
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		atomic.AddUint64(&c.lookups, uint64(len(addrs)))
		return out
	case "lookup_all":
		addr, err := netip.ParseAddr(req.Addr)
		if err != nil {
			return map[string]string{"error": fmt.Sprintf("addr %q: not an IP address", req.Addr)}
		}
		results := []Route{}
		for _, r := range c.snapshot() {
			r.mu.RLock()
			res, _ := r.lookup(addr.Unmap(), netip.Addr{})
			r.mu.RUnlock()
			results = append(results, res)
		}
		atomic.AddUint64(&c.lookups, 1)
		return map[string]any{"results": results}
	case "dump":
		c.mu.RLock()
		r, ok := c.routers[req.Router]
		c.mu.RUnlock()
		if !ok {
			return map[string]string{"error": fmt.Sprintf("no router %q", req.Router)}
		}
		r.mu.RLock()
		defer r.mu.RUnlock()
		return map[string]any{"paths": r.dump()}
	}
	return map[string]string{"error": fmt.Sprintf("unknown op %q (status, lookup, lookup_batch, lookup_packed, lookup_all, dump, gc)", req.Op)}
}

func (c *collector) snapshot() []*router {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*router, 0, len(c.routers))
	for _, n := range c.routerNames() {
		out = append(out, c.routers[n])
	}
	return out
}

// tableFor: the router whose table answers for this exporter: the one named by
// --router-for (config bmp_router), else the exporter's own address; when neither has a
// session and exactly one router has routes, that one (the small site's single router).
func (c *collector) tableFor(exporter string) *router {
	c.mu.RLock()
	defer c.mu.RUnlock()
	name := exporter
	if mapped, ok := c.routerFor[exporter]; ok {
		name = mapped
	}
	if r, ok := c.routers[name]; ok && c.conns[name] != nil {
		return r
	}
	var only *router
	for n := range c.conns {
		if only != nil {
			return nil
		}
		only = c.routers[n]
	}
	return only
}

type batchAnswer struct {
	Router string  `json:"router"`
	Routes []Route `json:"routes"`
	Index  []int   `json:"index"`
}

// lookupBatch: many addresses from one exporter's table; each distinct route answered once.
func (c *collector) lookupBatch(exporter string, addrs []string) (batchAnswer, error) {
	out := batchAnswer{Routes: []Route{}, Index: make([]int, len(addrs))}
	var r *router
	if exporter != "" {
		r = c.tableFor(exporter)
	} else if rs := c.snapshot(); len(rs) > 0 {
		r = c.tableFor(rs[0].addr)
	}
	parsed := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return out, fmt.Errorf("addrs[%d] %q: not an IP address", i, a)
		}
		parsed[i] = ip.Unmap()
	}
	if r == nil {
		for i := range out.Index {
			out.Index[i] = -1
		}
		return out, nil
	}
	type key struct {
		p netip.Prefix
		x path
	}
	seen := map[key]int{}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out.Router = r.addr
	for i, ip := range parsed {
		p, x, ok := r.match(ip, netip.Addr{})
		if !ok {
			out.Index[i] = -1
			continue
		}
		k := key{p, x}
		j, ok := seen[k]
		if !ok {
			j = len(out.Routes)
			seen[k] = j
			out.Routes = append(out.Routes, r.route(p, x))
		}
		out.Index[i] = j
	}
	return out, nil
}

// strCol: texts in Arrow's string layout (little-endian int32 offsets, n+1, and the bytes).
type strCol struct {
	off  []byte
	data []byte
	n    int32
}

func newStrCol() *strCol { return &strCol{off: make([]byte, 4, 1024)} }

func (s *strCol) add(t string) {
	s.data = append(s.data, t...)
	s.off = binary.LittleEndian.AppendUint32(s.off, uint32(len(s.data)))
	s.n++
}

// unpackStrings: the addresses of a lookup_packed request (one string over the data: the
// addresses are substrings of it, not one allocation each).
func unpackStrings(offsets, data []byte) ([]string, error) {
	if len(offsets) < 4 || len(offsets)%4 != 0 {
		return nil, fmt.Errorf("offsets: %d bytes, expected n+1 little-endian int32s", len(offsets))
	}
	text := string(data)
	n := len(offsets)/4 - 1
	out := make([]string, n)
	prev := binary.LittleEndian.Uint32(offsets)
	for i := 0; i < n; i++ {
		next := binary.LittleEndian.Uint32(offsets[4*(i+1):])
		if next < prev || int(next) > len(text) {
			return nil, fmt.Errorf("offsets[%d] = %d: outside the %d bytes of data", i+1, next, len(text))
		}
		out[i] = text[prev:next]
		prev = next
	}
	return out, nil
}

type packedAnswer struct {
	Router          string `json:"router"`
	Index           []byte `json:"index"`
	PrefixOffsets   []byte `json:"prefix_offsets"`
	PrefixData      []byte `json:"prefix_data"`
	Attr            []byte `json:"attr"`
	ASPathOffsets   []byte `json:"as_path_offsets"`
	ASPath          []byte `json:"as_path"`
	CommOffsets     []byte `json:"communities_offsets"`
	CommStrOffsets  []byte `json:"community_offsets"`
	CommData        []byte `json:"community_data"`
	LargeOffsets    []byte `json:"large_offsets"`
	LargeStrOffsets []byte `json:"large_string_offsets"`
	LargeData       []byte `json:"large_data"`
	NextHopOffsets  []byte `json:"next_hop_offsets"`
	NextHopData     []byte `json:"next_hop_data"`
	Origin          []byte `json:"origin"`
}

// lookupPacked: lookupBatch's answer as Arrow-layout columns (the ingest's form, see the list above).
func (c *collector) lookupPacked(exporter string, addrs []string) (packedAnswer, error) {
	var out packedAnswer
	parsed := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return out, fmt.Errorf("addrs[%d] %q: not an IP address", i, a)
		}
		parsed[i] = ip.Unmap()
	}
	var r *router
	if exporter != "" {
		r = c.tableFor(exporter)
	} else if rs := c.snapshot(); len(rs) > 0 {
		r = c.tableFor(rs[0].addr)
	}
	index := make([]byte, 4*len(addrs))
	prefixes, nextHops := newStrCol(), newStrCol()
	comms, commLists := newStrCol(), []byte{0, 0, 0, 0}
	large, largeLists := newStrCol(), []byte{0, 0, 0, 0}
	var attr, asPath, asLists, origin []byte
	asLists = []byte{0, 0, 0, 0}
	nPath := uint32(0)
	if r != nil {
		type key struct {
			p netip.Prefix
			x path
		}
		routes := map[key]int32{}
		sets := map[path]int32{}
		r.mu.RLock()
		defer r.mu.RUnlock()
		out.Router = r.addr
		for i, ip := range parsed {
			p, x, ok := r.match(ip, netip.Addr{})
			if !ok {
				binary.LittleEndian.PutUint32(index[4*i:], ^uint32(0))
				continue
			}
			k := key{p, x}
			j, ok := routes[k]
			if !ok {
				j = prefixes.n
				routes[k] = j
				prefixes.add(p.String())
				s, ok := sets[x]
				if !ok {
					s = int32(len(sets))
					sets[x] = s
					rt := r.route(p, x)
					for _, as := range rt.ASPath {
						asPath = binary.LittleEndian.AppendUint32(asPath, as)
					}
					nPath += uint32(len(rt.ASPath))
					asLists = binary.LittleEndian.AppendUint32(asLists, nPath)
					for _, cm := range rt.Communities {
						comms.add(cm)
					}
					commLists = binary.LittleEndian.AppendUint32(commLists, uint32(comms.n))
					for _, cm := range rt.LargeCommunities {
						large.add(cm)
					}
					largeLists = binary.LittleEndian.AppendUint32(largeLists, uint32(large.n))
					nextHops.add(rt.NextHop)
					origin = binary.LittleEndian.AppendUint32(origin, rt.OriginAS)
				}
				attr = binary.LittleEndian.AppendUint32(attr, uint32(s))
			}
			binary.LittleEndian.PutUint32(index[4*i:], uint32(j))
		}
	} else {
		for i := range parsed {
			binary.LittleEndian.PutUint32(index[4*i:], ^uint32(0))
		}
	}
	out.Index, out.Attr, out.Origin = index, attr, origin
	out.PrefixOffsets, out.PrefixData = prefixes.off, prefixes.data
	out.ASPathOffsets, out.ASPath = asLists, asPath
	out.CommOffsets, out.CommStrOffsets, out.CommData = commLists, comms.off, comms.data
	out.LargeOffsets, out.LargeStrOffsets, out.LargeData = largeLists, large.off, large.data
	out.NextHopOffsets, out.NextHopData = nextHops.off, nextHops.data
	return out, nil
}

func (c *collector) lookup(q query) (Route, error) {
	addr, err := netip.ParseAddr(q.Addr)
	if err != nil {
		return Route{}, fmt.Errorf("addr %q: not an IP address", q.Addr)
	}
	var nh netip.Addr
	if q.NextHop != "" {
		if nh, err = netip.ParseAddr(q.NextHop); err != nil {
			return Route{}, fmt.Errorf("next_hop %q: not an IP address", q.NextHop)
		}
		nh = nh.Unmap()
	}
	if q.Exporter != "" {
		r := c.tableFor(q.Exporter)
		if r == nil {
			return unknownRoute(""), nil
		}
		r.mu.RLock()
		defer r.mu.RUnlock()
		res, _ := r.lookup(addr.Unmap(), nh)
		return res, nil
	}
	// no exporter: the first router (by address) with a route
	for _, r := range c.snapshot() {
		r.mu.RLock()
		res, ok := r.lookup(addr.Unmap(), nh)
		r.mu.RUnlock()
		if ok {
			return res, nil
		}
	}
	return unknownRoute(""), nil
}

func iso(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// status: what `flowlake routing status`, `flowlake status` and /metrics show.
func (c *collector) status() map[string]any {
	routers := map[string]any{}
	totalPrefixes, totalPaths, up := 0, 0, 0
	for _, r := range c.snapshot() {
		r.mu.RLock()
		peersUp := 0
		for _, p := range r.peers {
			if p.up {
				peersUp++
			}
		}
		resets := map[string]uint64{}
		for k, v := range r.resets {
			resets[k] = v
		}
		view, ok := r.bestView()
		lookupView := ""
		if ok {
			lookupView = ribNames[view]
		}
		session := "closed"
		if r.up {
			session = "up"
			up++
		}
		routers[r.addr] = map[string]any{
			"session": session, "connected": iso(r.connected), "closed": iso(r.closed),
			"sys_name": r.sysName, "sys_descr": r.sysDescr, "peers": len(peerSessions(r)), "peers_up": peersUp,
			"routes": map[string]int{"ipv4": r.v4, "ipv6": r.v6}, "paths": r.paths,
			"views": map[string]int{"pre_policy": r.views[ribPrePolicy], "post_policy": r.views[ribPostPolicy],
				"loc_rib": r.views[ribLocRIB]},
			"lookup_view": lookupView, "messages": r.messages, "ignored_messages": r.ignoredMsgs,
			"last_update": iso(r.lastUpdate), "sessions": r.sessions, "resets": resets, "last_error": r.lastError,
		}
		totalPrefixes += r.v4 + r.v6
		totalPaths += r.paths
		r.mu.RUnlock()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c.mu.RLock()
	resets := map[string]uint64{}
	for k, v := range c.resets {
		resets[k] = v
	}
	out := map[string]any{
		"listen": c.listenAddr, "started": iso(c.started), "routers": routers,
		"sessions": map[string]any{"up": up, "total": c.sessions}, "resets": resets, "refused": c.refused,
		"routes": totalPrefixes, "paths": totalPaths, "memory_bytes": ms.HeapInuse, "memory_sys_bytes": ms.Sys,
		"lookups": atomic.LoadUint64(&c.lookups), "max_routes_per_router": c.maxRoutes,
	}
	c.mu.RUnlock()
	return out
}

// peerSessions: the router's BGP peers (a peer's pre- and post-policy views count once).
func peerSessions(r *router) map[peerKey]bool {
	out := map[peerKey]bool{}
	for _, p := range r.peers {
		k := p.key
		if k.rib != ribLocRIB {
			k.rib = 0
		}
		out[k] = true
	}
	return out
}
