// Command flowlake-toptalkers computes the top_talkers report of one day of the lake's
// flows on one machine: every top-N list (per hour and for the day, per direction and
// 'all', by src, dst and pair, by bytes, packets and flows) in one pass over the files.
//
// jobs/top_talkers_local.py runs it and adds rank_change; the table definition is
// schemas/reports.py TOP_TALKERS and the reference implementation is Spark's
// jobs/top_talkers.py (tests/jobs/test_jobs.py checks both give the same rows and that they
// equal nfdump's -s statistics). Why Go: the list set of 10M flows costs DuckDB ~12 s
// on two cores against a target of ~3 s (half nfdump's single-thread rate); most of
// that is hashing address text. Here every address is interned once into a small
// integer, and everything after the read sorts and sums integers (~2.2 s).
//
//	flowlake-toptalkers -top-n 20 -local 10.0.0.0/8,2001:db8::/32 -out lists.parquet \
//	    lake/flows/date=2026-11-20/hour=00/part-0.parquet ...
//
// Each input file's hour comes from its hive path (hour=NN), as Spark and DuckDB read it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	topN := flag.Int("top-n", 20, "list length N")
	local := flag.String("local", "", "comma-separated local prefixes ([site] local_prefixes)")
	out := flag.String("out", "", "Parquet file to write the lists to")
	listing := flag.String("files", "", "a file naming the flow files, one per line (besides the arguments)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(),
			"usage: flowlake-toptalkers -top-n N -local PREFIXES -out FILE [-files LIST] FLOWS.parquet ...\n\n"+
				"Top-N lists of one day of flow files (hour taken from each path's hour=NN).\n\n")
		flag.PrintDefaults()
	}
	verbose = flag.Bool("v", false, "print each phase's time to stderr")
	profile := flag.String("cpuprofile", "", "write a CPU profile here (development)")
	classify := flag.Bool("classify", false, "read address texts from stdin, one JSON string (or null) a line, "+
		"and print 1 (local) or 0 a line: the locality rule alone (tests/pipelines/test_locality.py)")
	flag.Parse()
	if *classify {
		if err := classifyLines(*local, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "flowlake-toptalkers:", err)
			os.Exit(1)
		}
		return
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "flowlake-toptalkers:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	files := flag.Args()
	if *listing != "" {
		text, err := os.ReadFile(*listing)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flowlake-toptalkers:", err)
			os.Exit(1)
		}
		for _, f := range strings.Split(string(text), "\n") {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	if err := run(*topN, *local, *out, files); err != nil {
		fmt.Fprintln(os.Stderr, "flowlake-toptalkers:", err)
		os.Exit(1)
	}
}

var verbose *bool

// phase prints the time since the previous phase with -v.
var phase = func() func(string) {
	last := time.Now()
	return func(what string) {
		if *verbose {
			fmt.Fprintf(os.Stderr, "%-10s %6.3f s\n", what, time.Since(last).Seconds())
		}
		last = time.Now()
	}
}()

func run(topN int, local, out string, files []string) error {
	if topN < 1 {
		return fmt.Errorf("-top-n %d: must be at least 1", topN)
	}
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	loc, err := newLocality(local)
	if err != nil {
		return err
	}
	byHour := map[int][]string{}
	for _, f := range files {
		h, err := hourOf(f)
		if err != nil {
			return err
		}
		byHour[h] = append(byHour[h], f)
	}
	hours := make([]hourFiles, 0, len(byHour))
	for h, fs := range byHour {
		hours = append(hours, hourFiles{h, fs})
	}
	sort.Slice(hours, func(i, j int) bool { return hours[i].hour < hours[j].hour })
	lists, names, err := compute(hours, loc, topN, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	err = writeLists(out, lists, names)
	phase("write")
	return err
}

// hourOf reads the hive partition value hour=NN of a flow file's path.
func hourOf(path string) (int, error) {
	for _, part := range strings.Split(filepath.ToSlash(path), "/") {
		if v, ok := strings.CutPrefix(part, "hour="); ok {
			h, err := strconv.Atoi(v)
			if err != nil || h < 0 || h > 23 {
				return 0, fmt.Errorf("%s: partition %q is not an hour 0-23", path, part)
			}
			return h, nil
		}
	}
	return 0, fmt.Errorf("%s: no hour=NN partition in the path", path)
}

// parallel runs fn(i) for i in [0, n) on `workers` goroutines; the first error wins.
func parallel(n, workers int, fn func(worker, i int) error) error {
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := fn(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	return first
}
