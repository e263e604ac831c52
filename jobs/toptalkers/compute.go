package main

import "sort"

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

// hostScratch accumulates per-address totals by direction for one list (src or dst).
type hostScratch struct {
	acc     [][4]totals
	stamp   []int32
	gen     int32
	touched []uint32
	day     [][4]totals // this worker's share of the whole-day totals
}

func newHostScratch(n int) *hostScratch {
	return &hostScratch{acc: make([][4]totals, n), stamp: make([]int32, n), day: make([][4]totals, n)}
}

// compute builds every list: hours in parallel (one pass over their flows each), then
// the day's pair lists from the hours' pairs in shards, then the day's host lists.
func compute(flows []chunk, names []string, local []bool, n, workers int) map[int]*listSet {
	r := &ranker{n: n, names: names}
	byHour := map[int][]chunk{}
	for _, c := range flows {
		byHour[c.hour] = append(byHour[c.hour], c)
	}
	hours := make([]int, 0, len(byHour))
	for h := range byHour {
		hours = append(hours, h)
	}
	sort.Ints(hours)
	direction := func(s, d uint32) uint8 {
		return uint8(b2i(local[s])*2 + b2i(local[d])) // transit, inbound, outbound, internal
	}

	out := make([]*listSet, len(hours))
	pairs := make([]hourPairs, len(hours))
	scratch := make([][2]*hostScratch, workers)
	for w := range scratch {
		scratch[w] = [2]*hostScratch{newHostScratch(len(names)), newHostScratch(len(names))}
	}
	_ = parallel(len(hours), workers, func(w, i int) error {
		p := aggregatePairs(byHour[hours[i]], direction)
		byHour[hours[i]] = nil // the flows are no longer needed
		ls := &listSet{}
		for j, k := range p.keys {
			it := item{s: uint32(k >> 32), d: uint32(k), v: p.vals[j]}
			ls.totals[p.dirs[j]].add(it.v)
			ls.totals[all].add(it.v)
			r.offerAll(&ls.lists[p.dirs[j]][byPair], it)
			r.offerAll(&ls.lists[all][byPair], it)
		}
		hostLists(r, ls, &p, scratch[w][bySrc], bySrc)
		hostLists(r, ls, &p, scratch[w][byDst], byDst)
		out[i], pairs[i] = ls, p
		return nil
	})

	phase("hours")
	day := &listSet{}
	for _, ls := range out {
		for d := range ls.totals {
			day.totals[d].add(ls.totals[d])
		}
	}
	dayPairs(r, day, out, pairs)
	phase("day pairs")
	// the day's hosts: the workers' shares of per-address totals, summed
	for by := bySrc; by <= byDst; by++ {
		for a := range names {
			var sum totals
			for d := 0; d < 4; d++ {
				var t totals
				for w := range scratch {
					t.add(scratch[w][by].day[a][d])
				}
				if t[2] == 0 { // no flow: no such key
					continue
				}
				sum.add(t)
				r.offerAll(&day.lists[d][by], hostItem(by, uint32(a), t))
			}
			if sum[2] > 0 {
				r.offerAll(&day.lists[all][by], hostItem(by, uint32(a), sum))
			}
		}
	}

	result := map[int]*listSet{dayHour: day}
	for i, h := range hours {
		result[h] = out[i]
	}
	return result
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

// aggregatePairs sums one hour's flows per (src, dst).
func aggregatePairs(chunks []chunk, direction func(s, d uint32) uint8) hourPairs {
	rows := 0
	for _, c := range chunks {
		rows += len(c.src)
	}
	idx := make(map[uint64]int32, rows/2)
	p := hourPairs{keys: make([]uint64, 0, rows), vals: make([]totals, 0, rows), dirs: make([]uint8, 0, rows)}
	for _, c := range chunks {
		for i := range c.src {
			k := uint64(c.src[i])<<32 | uint64(c.dst[i])
			j, ok := idx[k]
			if !ok {
				j = int32(len(p.keys))
				idx[k] = j
				p.keys = append(p.keys, k)
				p.vals = append(p.vals, totals{})
				p.dirs = append(p.dirs, direction(c.src[i], c.dst[i]))
			}
			v := &p.vals[j]
			v[0] += c.bytes[i]
			v[1] += c.packets[i]
			v[2]++
		}
	}
	return p
}

// hostLists ranks one hour's sources (or destinations) per direction and in all, and
// adds their totals to the worker's share of the day.
func hostLists(r *ranker, ls *listSet, p *hourPairs, h *hostScratch, by int) {
	h.gen++
	h.touched = h.touched[:0]
	for j, k := range p.keys {
		a := uint32(k >> 32)
		if by == byDst {
			a = uint32(k)
		}
		if h.stamp[a] != h.gen {
			h.stamp[a] = h.gen
			h.acc[a] = [4]totals{}
			h.touched = append(h.touched, a)
		}
		h.acc[a][p.dirs[j]].add(p.vals[j])
	}
	for _, a := range h.touched {
		var sum totals
		for d, t := range h.acc[a] {
			if t[2] == 0 {
				continue
			}
			sum.add(t)
			h.day[a][d].add(t)
			r.offerAll(&ls.lists[d][by], hostItem(by, a, t))
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
func dayPairs(r *ranker, day *listSet, hours []*listSet, pairs []hourPairs) {
	seeds := map[uint64]*dayPair{}
	for _, ls := range hours {
		for d := range ls.lists {
			for _, t := range ls.lists[d][byPair] {
				for _, it := range t {
					seeds[uint64(it.s)<<32|uint64(it.d)] = &dayPair{}
				}
			}
		}
	}
	sumOver(pairs, seeds)
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
	cands := map[uint64]*dayPair{}
	for _, p := range pairs {
		for j, k := range p.keys {
			d := p.dirs[j]
			for m := 0; m < 3; m++ {
				if need := min(floor[d][m], floor[all][m]); p.vals[j][m] >= (need+h-1)/h {
					cands[k] = &dayPair{}
					break
				}
			}
		}
	}
	sumOver(pairs, cands)
	for _, p := range cands {
		r.offerAll(&day.lists[p.dir][byPair], p.item)
		r.offerAll(&day.lists[all][byPair], p.item)
	}
}

type dayPair struct {
	item
	dir uint8
}

// sumOver fills in the day totals (and direction) of the pairs in `of`.
func sumOver(pairs []hourPairs, of map[uint64]*dayPair) {
	for _, p := range pairs {
		for j, k := range p.keys {
			if x := of[k]; x != nil {
				x.s, x.d, x.dir = uint32(k>>32), uint32(k), p.dirs[j]
				x.v.add(p.vals[j])
			}
		}
	}
}
