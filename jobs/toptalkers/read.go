package main

import (
	"fmt"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// chunk is one row group of flows: addresses as interned ids (0 = NULL), counts.
type chunk struct {
	src, dst       []uint32
	bytes, packets []int64
}

// resize makes the chunk n rows long, reusing its arrays.
func (c *chunk) resize(n int) {
	if cap(c.src) < n {
		c.src, c.dst, c.bytes, c.packets = make([]uint32, n), make([]uint32, n), make([]int64, n), make([]int64, n)
	}
	c.src, c.dst, c.bytes, c.packets = c.src[:n], c.dst[:n], c.bytes[:n], c.packets[:n]
}

// interner gives every distinct address text a small integer; names[0] is NULL.
// Canonical dotted IPv4 text (most of the lake) is keyed by its 32-bit value, which is
// far cheaper to hash and compare than the text; any other text is keyed by itself.
type interner struct {
	recent [1 << 16]struct{ ip, id uint32 } // direct-mapped cache in front of v4: busy hosts hit it
	v4     map[uint32]uint32
	ids    map[string]uint32
	names  []string
}

func newInterner() *interner {
	return &interner{v4: make(map[uint32]uint32, 1<<16), ids: make(map[string]uint32, 1<<10), names: []string{""}}
}

func (in *interner) id(b []byte) uint32 {
	if ip, ok := canonicalIPv4(b); ok {
		c := &in.recent[(ip*0x9E3779B1)>>16]
		if c.ip == ip && c.id != 0 {
			return c.id
		}
		v, ok := in.v4[ip]
		if !ok {
			v = in.add(string(b))
			in.v4[ip] = v
		}
		c.ip, c.id = ip, v
		return v
	}
	if v, ok := in.ids[string(b)]; ok { // no allocation: the compiler reads b in place
		return v
	}
	s := string(b)
	v := in.add(s)
	in.ids[s] = v
	return v
}

func (in *interner) add(s string) uint32 {
	in.names = append(in.names, s)
	return uint32(len(in.names) - 1)
}

// canonicalIPv4 parses dotted-quad text written the one canonical way (no leading
// zeros, no signs or spaces), so that equal values mean equal text.
func canonicalIPv4(b []byte) (uint32, bool) {
	if len(b) < 7 || len(b) > 15 {
		return 0, false
	}
	var ip, octet uint32
	digits, dots := 0, 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && octet == 0 { // leading zero
				return 0, false
			}
			octet = octet*10 + uint32(c-'0')
			digits++
			if octet > 255 {
				return 0, false
			}
		case c == '.' && digits > 0 && dots < 3:
			ip = ip<<8 | octet
			octet, digits = 0, 0
			dots++
		default:
			return 0, false
		}
	}
	if dots != 3 || digits == 0 {
		return 0, false
	}
	return ip<<8 | octet, true
}

// readFile reads src_addr, dst_addr, bytes and packets of each row group into c (its
// arrays reused) and calls each(c). A column the file lacks reads as NULL (addresses)
// or 0 (counts), as DuckDB's union_by_name does.
func readFile(path string, intern *interner, c *chunk, each func(*chunk)) error {
	r, err := file.OpenParquetFile(path, true)
	if err != nil {
		return fmt.Errorf("%s: not a readable Parquet file: %w", path, err)
	}
	defer r.Close()
	schema := r.MetaData().Schema
	for g := 0; g < r.NumRowGroups(); g++ {
		rg := r.RowGroup(g)
		c.resize(int(rg.NumRows()))
		for _, col := range []struct {
			name string
			addr []uint32
			num  []int64
		}{{"src_addr", c.src, nil}, {"dst_addr", c.dst, nil}, {"bytes", nil, c.bytes}, {"packets", nil, c.packets}} {
			idx := schema.ColumnIndexByName(col.name)
			if idx < 0 {
				clear(col.addr)
				clear(col.num)
				continue
			}
			cr, err := rg.Column(idx)
			if err == nil {
				maxDef := schema.Column(idx).MaxDefinitionLevel()
				if col.addr != nil {
					err = readAddresses(cr, maxDef, col.addr, intern)
				} else {
					err = readCounts(cr, maxDef, col.num)
				}
			}
			if err != nil {
				return fmt.Errorf("%s: row group %d, column %s: %w", path, g, col.name, err)
			}
		}
		each(c)
	}
	return nil
}

const batch = 8192

func readAddresses(cr file.ColumnChunkReader, maxDef int16, out []uint32, intern *interner) error {
	rd, ok := cr.(*file.ByteArrayColumnChunkReader)
	if !ok {
		return fmt.Errorf("not a string column (%s)", cr.Descriptor().PhysicalType())
	}
	values := make([]parquet.ByteArray, batch)
	def := make([]int16, batch)
	for pos := 0; pos < len(out); {
		total, n, err := rd.ReadBatchInPage(batch, values, def, nil) // values point into the page: interned at once
		if err != nil {
			return err
		}
		if total == 0 {
			return fmt.Errorf("%d of %d values", pos, len(out))
		}
		if maxDef == 0 || n == int(total) {
			for i := 0; i < n; i++ {
				out[pos+i] = intern.id(values[i])
			}
		} else {
			v := 0
			for i := 0; i < int(total); i++ {
				if def[i] == maxDef {
					out[pos+i] = intern.id(values[v])
					v++
				} else {
					out[pos+i] = 0
				}
			}
		}
		pos += int(total)
	}
	return nil
}

func readCounts(cr file.ColumnChunkReader, maxDef int16, out []int64) error {
	def := make([]int16, batch)
	spread := func(pos, total, n int) { // nulls count 0: move the n values to their rows
		if n == total {
			return
		}
		v := n - 1
		for i := total - 1; i >= 0; i-- {
			if def[i] == maxDef {
				out[pos+i] = out[pos+v]
				v--
			} else {
				out[pos+i] = 0
			}
		}
	}
	switch rd := cr.(type) {
	case *file.Int64ColumnChunkReader:
		for pos := 0; pos < len(out); {
			total, n, err := rd.ReadBatch(int64(min(batch, len(out)-pos)), out[pos:], def, nil)
			if err != nil {
				return err
			}
			if total == 0 {
				return fmt.Errorf("%d of %d values", pos, len(out))
			}
			spread(pos, int(total), n)
			pos += int(total)
		}
	case *file.Int32ColumnChunkReader:
		values := make([]int32, batch)
		for pos := 0; pos < len(out); {
			total, n, err := rd.ReadBatch(int64(min(batch, len(out)-pos)), values, def, nil)
			if err != nil {
				return err
			}
			if total == 0 {
				return fmt.Errorf("%d of %d values", pos, len(out))
			}
			for i := 0; i < n; i++ {
				out[pos+i] = int64(values[i])
			}
			spread(pos, int(total), n)
			pos += int(total)
		}
	default:
		return fmt.Errorf("not an integer column (%s)", cr.Descriptor().PhysicalType())
	}
	return nil
}
