package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// The lists as rows of the top_talkers table, without rank_change (added by the caller
// from the previous day's table). hour is NULL for the whole day.
var listSchema = arrow.NewSchema([]arrow.Field{
	{Name: "hour", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "direction", Type: arrow.BinaryTypes.String},
	{Name: "by", Type: arrow.BinaryTypes.String},
	{Name: "metric", Type: arrow.BinaryTypes.String},
	{Name: "rank", Type: arrow.PrimitiveTypes.Int32},
	{Name: "src_addr", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "dst_addr", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "bytes", Type: arrow.PrimitiveTypes.Int64},
	{Name: "packets", Type: arrow.PrimitiveTypes.Int64},
	{Name: "flows", Type: arrow.PrimitiveTypes.Int64},
	{Name: "share", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

func writeLists(path string, lists map[int]*listSet, names []string) error {
	b := array.NewRecordBuilder(memory.DefaultAllocator, listSchema)
	defer b.Release()
	f := b.Fields()
	addr := func(col int, id uint32) {
		if id == 0 {
			f[col].AppendNull()
		} else {
			f[col].(*array.StringBuilder).Append(names[id])
		}
	}
	hours := make([]int, 0, len(lists))
	for h := range lists {
		hours = append(hours, h)
	}
	sort.Ints(hours)
	for _, h := range hours {
		ls := lists[h]
		for d := range ls.lists {
			for by := range ls.lists[d] {
				for m, t := range ls.lists[d][by] {
					for rank, it := range t {
						if h == dayHour {
							f[0].AppendNull()
						} else {
							f[0].(*array.Int32Builder).Append(int32(h))
						}
						f[1].(*array.StringBuilder).Append(dirNames[d])
						f[2].(*array.StringBuilder).Append(byNames[by])
						f[3].(*array.StringBuilder).Append(metricNames[m])
						f[4].(*array.Int32Builder).Append(int32(rank + 1))
						addr(5, it.s)
						addr(6, it.d)
						for i := 0; i < 3; i++ {
							f[7+i].(*array.Int64Builder).Append(it.v[i])
						}
						if total := ls.totals[d][m]; total != 0 { // DuckDB: x / 0 is NULL
							f[10].(*array.Float64Builder).Append(float64(it.v[m]) / float64(total))
						} else {
							f[10].AppendNull()
						}
					}
				}
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	w, err := pqarrow.NewFileWriter(listSchema, out, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err == nil {
		err = w.Write(rec)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
