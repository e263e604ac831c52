package main

import (
	"math/bits"
	"slices"
)

// Directions as jobs/common.py with_direction labels them, plus the 'all' lists.
const (
	transit, inbound, outbound, internal, all = 0, 1, 2, 3, 4
	bySrc, byDst, byPair                      = 0, 1, 2
	dayHour                                   = 24 // index of the whole-day lists
)

var (
	dirNames    = [5]string{"transit", "inbound", "outbound", "internal", "all"}
	byNames     = [3]string{"src", "dst", "pair"}
	metricNames = [3]string{"bytes", "packets", "flows"}
	// rank ties: the other metrics in this order (descending), then address text
	others = [3][2]int{{1, 2}, {0, 2}, {0, 1}}
)

type totals [3]int64 // bytes, packets, flows

func (t *totals) add(o totals) { t[0] += o[0]; t[1] += o[1]; t[2] += o[2] }

// item is one key of a list: src and dst ids (0 = NULL, i.e. not part of the key).
type item struct {
	s, d uint32
	v    totals
}

// top holds the best n items of one list and metric, best first.
type top []item

// listSet is every list of one hour (or the day): [direction][by][metric].
type listSet struct {
	lists  [5][3][3]top
	totals [5]totals
}

type ranker struct {
	n     int
	names []string
}

// better orders a list: the metric descending, the other metrics descending, then
// src and dst address text ascending with NULL first (as DuckDB and Spark sort).
func (r *ranker) better(a, b *item, m int) bool {
	if a.v[m] != b.v[m] {
		return a.v[m] > b.v[m]
	}
	for _, o := range others[m] {
		if a.v[o] != b.v[o] {
			return a.v[o] > b.v[o]
		}
	}
	if a.s != b.s {
		return r.textLess(a.s, b.s)
	}
	return r.textLess(a.d, b.d)
}

func (r *ranker) textLess(x, y uint32) bool {
	if x == 0 || y == 0 {
		return x == 0 && y != 0
	}
	return r.names[x] < r.names[y]
}

func (r *ranker) offer(t *top, it item, m int) {
	l := *t
	if len(l) == r.n {
		if !r.better(&it, &l[r.n-1], m) {
			return
		}
		l[r.n-1] = it
	} else {
		l = append(l, it)
	}
	for i := len(l) - 1; i > 0 && r.better(&l[i], &l[i-1], m); i-- {
		l[i], l[i-1] = l[i-1], l[i]
	}
	*t = l
}

func (r *ranker) offerAll(t *[3]top, it item) {
	for m := range t {
		r.offer(&t[m], it, m)
	}
}

// hourPairs: the per-(src, dst) totals of one hour and the pairs' directions.
type hourPairs struct {
	keys []uint64 // src id << 32 | dst id
	vals []totals
	dirs []uint8
}

// hostScratch sums one hour's pairs per address for the src (or dst) lists: the pairs
// in address order (radix-sorted for dst) and summed run by run, sequential passes
// instead of a random update per pair into per-address totals (that random access was
// a third of the kernel's time).
type hostScratch struct {
	rows, tmp []hostRow
	day       [][2]totals // this worker's whole-day totals, by address and other end
}

// hostRow is one pair seen from one end: the address and the other end's locality.
type hostRow struct {
	addr, other uint32
	v           totals
}

func (h *hostScratch) grow(n int) {
	if n > cap(h.day) { // doubling: the numbering grows hour by hour
		h.day = append(make([][2]totals, 0, 2*n), h.day...)
	}
	h.day = h.day[:n]
}

// radixSort sorts rows by address (ids below 1 << keyBits), using tmp as scratch.
// (sortFlows is the same for flow rows: one loop per row type keeps the key read inline.)
func radixSort(rows, tmp []hostRow, keyBits int) {
	const digit = 11
	src, dst := rows, tmp
	for shift := 0; shift < keyBits; shift += digit {
		var count [1 << digit]int
		for i := range src {
			count[(src[i].addr>>shift)&(1<<digit-1)]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for i := range src {
			d := (src[i].addr >> shift) & (1<<digit - 1)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	if len(rows) > 0 && &src[0] != &rows[0] {
		copy(rows, src)
	}
}

// hostDir is the direction of a src (or dst) list entry: its own locality and slot.
func hostDir(by int, own bool, other int) int {
	if by == bySrc {
		return b2i(own)*2 + other
	}
	return other*2 + b2i(own)
}

// hourFiles is one hour's flow files.
type hourFiles struct {
	hour  int
	files []string
}

// worker holds one goroutine's state: its own address numbering (merged into the
// global one at the end) and per-address scratch, reused from hour to hour.
type worker struct {
	in       *interner
	loc      *locality
	local    []bool // by the worker's address id
	src, dst *hostScratch
	rows     chunk
	flows    []flowRow // one hour's flows, reused
	flowsTmp []flowRow
}

// flowRow is one flow: key = src id << 32 | dst id.
type flowRow struct {
	key            uint64
	bytes, packets int64
}

// sortFlows sorts rows by key (ids below 1 << idBits), using tmp as scratch: LSD radix
// over the compacted key src << idBits | dst.
func sortFlows(rows, tmp []flowRow, idBits int) {
	const digit = 12
	compact := func(k uint64) uint64 { return (k>>32)<<idBits | k&0xFFFFFFFF }
	src, dst := rows, tmp
	for shift := 0; shift < 2*idBits; shift += digit {
		var count [1 << digit]int
		for i := range src {
			count[(compact(src[i].key)>>shift)&(1<<digit-1)]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for i := range src {
			d := (compact(src[i].key) >> shift) & (1<<digit - 1)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	if len(rows) > 0 && &src[0] != &rows[0] {
		copy(rows, src)
	}
}

// hourResult is one hour's lists and pairs, in the numbering of the worker that made them.
type hourResult struct {
	worker int
	lists  *listSet
	pairs  hourPairs
}

// compute builds every list. Each hour is one task: its files are read, its pairs
// summed, and its lists made while that hour's data is still in cache; then the
// workers' address numberings are merged and the day's lists made from the hours.
func compute(hours []hourFiles, loc *locality, n, workers int) (map[int]*listSet, []string, error) {
	ws := make([]*worker, workers)
	for w := range ws {
		ws[w] = &worker{in: newInterner(), loc: loc, local: []bool{false}, src: &hostScratch{}, dst: &hostScratch{}}
	}
	results := make([]hourResult, len(hours))
	err := parallel(len(hours), workers, func(w, i int) error {
		ls, p, err := ws[w].hour(hours[i].files, n)
		results[i] = hourResult{w, ls, p}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	phase("hours")

	// one numbering: worker 0's, extended by the others' addresses
	global := ws[0]
	remaps := make([][]uint32, workers)
	for w := 1; w < workers; w++ {
		remap := make([]uint32, len(ws[w].in.names))
		for id, name := range ws[w].in.names[1:] {
			remap[id+1] = global.in.id([]byte(name))
		}
		remaps[w] = remap
	}
	global.grow()
	names, local := global.in.names, global.local
	_ = parallel(len(results), workers, func(_, i int) error {
		if remap := remaps[results[i].worker]; remap != nil {
			results[i].renumber(remap)
		}
		return nil
	})
	phase("renumber")

	r := &ranker{n: n, names: names}
	day := &listSet{}
	lists := map[int]*listSet{dayHour: day}
	pairs := make([]hourPairs, len(results))
	for i, res := range results {
		lists[hours[i].hour] = res.lists
		pairs[i] = res.pairs
		for d := range res.lists.totals {
			day.totals[d].add(res.lists.totals[d])
		}
	}
	dayPairs(r, day, results, pairs, workers)
	phase("day pairs")
	// the day's hosts: the workers' per-address totals, summed in the one numbering
	for by := bySrc; by <= byDst; by++ {
		sums := make([][2]totals, len(names))
		for w, wk := range ws {
			h := wk.src
			if by == byDst {
				h = wk.dst
			}
			for a, t := range h.day {
				g := uint32(a)
				if remaps[w] != nil {
					g = remaps[w][a]
				}
				sums[g][0].add(t[0])
				sums[g][1].add(t[1])
			}
		}
		for a, ts := range sums {
			var sum totals
			for other, t := range ts {
				if t[2] == 0 { // no flow: no such key
					continue
				}
				sum.add(t)
				r.offerAll(&day.lists[hostDir(by, local[a], other)][by], hostItem(by, uint32(a), t))
			}
			if sum[2] > 0 {
				r.offerAll(&day.lists[all][by], hostItem(by, uint32(a), sum))
			}
		}
	}
	return lists, names, nil
}

// grow extends the worker's per-address state to every address it has interned.
func (w *worker) grow() {
	for id := len(w.local); id < len(w.in.names); id++ {
		w.local = append(w.local, w.loc.isLocal(w.in.names[id]))
	}
	w.src.grow(len(w.in.names))
	w.dst.grow(len(w.in.names))
}

// hour reads one hour's files and makes its lists (in the worker's numbering).
func (w *worker) hour(files []string, n int) (*listSet, hourPairs, error) {
	// the hour's flows as (pair, bytes, packets) rows, sorted by pair and summed run by run
	// (radix sort: sequential passes, where a hash table costs a cache miss per flow)
	rows := w.flows[:0]
	for _, f := range files {
		err := readFile(f, w.in, &w.rows, func(c *chunk) {
			for i := range c.src {
				rows = append(rows, flowRow{uint64(c.src[i])<<32 | uint64(c.dst[i]), c.bytes[i], c.packets[i]})
			}
		})
		if err != nil {
			return nil, hourPairs{}, err
		}
	}
	w.flowsTmp = slices.Grow(w.flowsTmp[:0], len(rows))[:len(rows)]
	sortFlows(rows, w.flowsTmp, bits.Len32(uint32(len(w.in.names))))
	w.flows = rows
	var p hourPairs
	for i := 0; i < len(rows); {
		k := rows[i].key
		var v totals
		for ; i < len(rows) && rows[i].key == k; i++ {
			v[0] += rows[i].bytes
			v[1] += rows[i].packets
			v[2]++
		}
		p.keys = append(p.keys, k)
		p.vals = append(p.vals, v)
	}
	w.grow()
	r := &ranker{n: n, names: w.in.names}
	ls := &listSet{}
	p.dirs = make([]uint8, len(p.keys))
	for j, k := range p.keys {
		it := item{s: uint32(k >> 32), d: uint32(k), v: p.vals[j]}
		dir := uint8(b2i(w.local[it.s])*2 + b2i(w.local[it.d])) // transit, inbound, outbound, internal
		p.dirs[j] = dir
		ls.totals[dir].add(it.v)
		ls.totals[all].add(it.v)
		r.offerAll(&ls.lists[dir][byPair], it)
		r.offerAll(&ls.lists[all][byPair], it)
	}
	idBits := bits.Len32(uint32(len(w.in.names)))
	hostLists(r, ls, &p, w.src, bySrc, w.local, idBits)
	hostLists(r, ls, &p, w.dst, byDst, w.local, idBits)
	return ls, p, nil
}

// renumber moves an hour's pairs and list entries into the global numbering.
func (res *hourResult) renumber(remap []uint32) {
	for j, k := range res.pairs.keys {
		res.pairs.keys[j] = uint64(remap[k>>32])<<32 | uint64(remap[uint32(k)])
	}
	for d := range res.lists.lists {
		for by := range res.lists.lists[d] {
			for _, t := range res.lists.lists[d][by] {
				for i := range t {
					t[i].s, t[i].d = remap[t[i].s], remap[t[i].d]
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hostItem(by int, a uint32, v totals) item {
	if by == bySrc {
		return item{s: a, v: v}
	}
	return item{d: a, v: v}
}

// hostLists ranks one hour's sources (or destinations) per direction and in all, and
// adds their totals to the worker's whole-day totals. The pairs come sorted by source,
// so sources are runs already; destinations are radix-sorted into runs first.
func hostLists(r *ranker, ls *listSet, p *hourPairs, h *hostScratch, by int, local []bool, idBits int) {
	n := len(p.keys)
	h.rows = slices.Grow(h.rows[:0], n)[:n]
	for j, k := range p.keys {
		a, other := uint32(k>>32), uint32(p.dirs[j]&1) // dirs: src local << 1 | dst local
		if by == byDst {
			a, other = uint32(k), uint32(p.dirs[j]>>1)
		}
		h.rows[j] = hostRow{a, other, p.vals[j]}
	}
	if by == byDst {
		h.tmp = slices.Grow(h.tmp[:0], n)[:n]
		radixSort(h.rows, h.tmp, idBits)
	}
	for i := 0; i < n; {
		a := h.rows[i].addr
		var t [2]totals // by the other end's locality
		for ; i < n && h.rows[i].addr == a; i++ {
			t[h.rows[i].other].add(h.rows[i].v)
		}
		var sum totals
		for other := range t {
			if t[other][2] == 0 {
				continue
			}
			sum.add(t[other])
			h.day[a][other].add(t[other])
			r.offerAll(&ls.lists[hostDir(by, local[a], other)][by], hostItem(by, a, t[other]))
		}
		r.offerAll(&ls.lists[all][by], hostItem(by, a, sum))
	}
}

// dayPairs ranks the day's pairs without aggregating every pair over the day (most
// pairs cannot reach a list, and that aggregation was a third of the work). The pairs
// listed in some hour ("seeds") get their exact day totals; per list and metric the
// N-th largest of those, floor, is at most the list's N-th value. A pair whose day
// total reaches the floor has at least floor / hours in one hour, so only pairs with
// such an hour are candidates, and only they are summed over the day.
func dayPairs(r *ranker, day *listSet, hours []hourResult, pairs []hourPairs, workers int) {
	if len(pairs) == 0 {
		return
	}
	seeds := map[uint64]*dayPair{}
	for _, res := range hours {
		ls := res.lists
		for d := range ls.lists {
			for _, t := range ls.lists[d][byPair] {
				for _, it := range t {
					seeds[uint64(it.s)<<32|uint64(it.d)] = &dayPair{}
				}
			}
		}
	}
	sumOver(pairs, seeds, workers)
	var floor [5][3]int64 // 0 (everything a candidate) while a list has fewer than N seeds
	for m := 0; m < 3; m++ {
		var best [5]top
		for _, p := range seeds {
			r.offer(&best[p.dir], p.item, m)
			r.offer(&best[all], p.item, m)
		}
		for d := range best {
			if len(best[d]) == r.n {
				floor[d][m] = best[d][r.n-1].v[m]
			}
		}
	}
	h := int64(len(pairs))
	found := make([][]uint64, workers)
	_ = parallel(len(pairs), workers, func(w, i int) error {
		p := pairs[i]
		for j, k := range p.keys {
			d := p.dirs[j]
			for m := 0; m < 3; m++ {
				if need := min(floor[d][m], floor[all][m]); p.vals[j][m] >= (need+h-1)/h {
					found[w] = append(found[w], k)
					break
				}
			}
		}
		return nil
	})
	cands := map[uint64]*dayPair{}
	for _, keys := range found {
		for _, k := range keys {
			cands[k] = &dayPair{}
		}
	}
	sumOver(pairs, cands, workers)
	for _, p := range cands {
		r.offerAll(&day.lists[p.dir][byPair], p.item)
		r.offerAll(&day.lists[all][byPair], p.item)
	}
}

type dayPair struct {
	item
	dir uint8
}

// sumOver fills in the day totals (and direction) of the pairs in `of`: the hours
// shared out to the workers, each summing its own copy, then the copies added up.
func sumOver(pairs []hourPairs, of map[uint64]*dayPair, workers int) {
	parts := make([]map[uint64]*dayPair, workers)
	_ = parallel(len(pairs), workers, func(w, i int) error {
		if parts[w] == nil {
			parts[w] = make(map[uint64]*dayPair, len(of))
		}
		p := pairs[i]
		for j, k := range p.keys {
			if _, ok := of[k]; ok { // `of` is only read here
				x := parts[w][k]
				if x == nil {
					x = &dayPair{item: item{s: uint32(k >> 32), d: uint32(k)}, dir: p.dirs[j]}
					parts[w][k] = x
				}
				x.v.add(p.vals[j])
			}
		}
		return nil
	})
	for _, part := range parts {
		for k, x := range part {
			y := of[k]
			y.s, y.d, y.dir = x.s, x.d, x.dir
			y.v.add(x.v)
		}
	}
}
