package main

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
)

// Avro binary encoding of the FLOW record, field order taken from the schema the
// Python side generates (schemas/flow.py), so the one declaration stays the truth.

type fieldID int

const (
	fTimeStart fieldID = iota
	fTimeEnd
	fExporter
	fInputIf
	fOutputIf
	fSrcAddr
	fDstAddr
	fSrcPort
	fDstPort
	fProto
	fTCPFlags
	fTos
	fPackets
	fBytes
	fSamplingRate
	fSrcAS
	fDstAS
	fSourceFile
	fFileSeq
	fSrcVlan
	fDstVlan
	fNull // a nullable field the shipper does not know: always null
)

var knownFields = map[string]struct {
	id     fieldID
	string bool
}{
	"time_start": {fTimeStart, false}, "time_end": {fTimeEnd, false}, "exporter": {fExporter, true},
	"input_if": {fInputIf, false}, "output_if": {fOutputIf, false},
	"src_addr": {fSrcAddr, true}, "dst_addr": {fDstAddr, true},
	"src_port": {fSrcPort, false}, "dst_port": {fDstPort, false}, "proto": {fProto, false},
	"tcp_flags": {fTCPFlags, false}, "tos": {fTos, false}, "packets": {fPackets, false},
	"bytes": {fBytes, false}, "sampling_rate": {fSamplingRate, false},
	"src_as": {fSrcAS, false}, "dst_as": {fDstAS, false},
	"source_file": {fSourceFile, true}, "file_seq": {fFileSeq, false},
	"src_vlan": {fSrcVlan, false}, "dst_vlan": {fDstVlan, false},
}

type encField struct {
	id       fieldID
	nullable bool // union ["null", T]: branch index 1 precedes the value
}

// Encoder writes Avro single-object encoded FLOW records.
type Encoder struct {
	header  []byte // C3 01 + 8-byte fingerprint
	fields  []encField
	Names   []string
	Base    []string // Avro primitive of each field ("long", "string", ...)
	Logical []string // its logical type ("timestamp-millis") or ""
}

// NewEncoder builds the field program from the schema JSON and its fingerprint (hex,
// the 8 little-endian bytes of CRC-64-AVRO that Python computes).
func NewEncoder(schemaJSON []byte, fingerprintHex string) (*Encoder, error) {
	fp, err := hex.DecodeString(fingerprintHex)
	if err != nil || len(fp) != 8 {
		return nil, fmt.Errorf("fingerprint %q: want 16 hex digits (8 bytes)", fingerprintHex)
	}
	var schema struct {
		Type   string `json:"type"`
		Name   string `json:"name"`
		Fields []struct {
			Name string          `json:"name"`
			Type json.RawMessage `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		return nil, fmt.Errorf("schema: not valid JSON: %v", err)
	}
	if schema.Type != "record" || len(schema.Fields) == 0 {
		return nil, fmt.Errorf("schema: want a record with fields, got type %q", schema.Type)
	}
	enc := &Encoder{header: append([]byte{0xC3, 0x01}, fp...)}
	for _, f := range schema.Fields {
		base, nullable, err := avroType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("schema field %s: %v", f.Name, err)
		}
		k, ok := knownFields[f.Name]
		if !ok {
			if !nullable {
				return nil, fmt.Errorf("schema field %s (%s) is unknown to the shipper and not nullable: update collectors/shipper/avro.go", f.Name, base)
			}
			enc.fields = append(enc.fields, encField{id: fNull})
			enc.Names = append(enc.Names, f.Name)
			enc.Base, enc.Logical = append(enc.Base, base), append(enc.Logical, avroLogical(f.Type))
			continue
		}
		if k.string && base != "string" {
			return nil, fmt.Errorf("schema field %s: type %s, the shipper writes a string", f.Name, base)
		}
		if !k.string && base != "int" && base != "long" {
			return nil, fmt.Errorf("schema field %s: type %s, the shipper writes an int/long", f.Name, base)
		}
		enc.fields = append(enc.fields, encField{id: k.id, nullable: nullable})
		enc.Names = append(enc.Names, f.Name)
		enc.Base, enc.Logical = append(enc.Base, base), append(enc.Logical, avroLogical(f.Type))
	}
	return enc, nil
}

// avroType reduces a field type to its primitive name (logical types ride on long/int).
func avroType(raw json.RawMessage) (string, bool, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, false, nil
	}
	var obj struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Type != "" {
		return obj.Type, false, nil
	}
	var union []json.RawMessage
	if json.Unmarshal(raw, &union) == nil && len(union) == 2 {
		if first, _, _ := avroType(union[0]); first == "null" {
			t, _, err := avroType(union[1])
			return t, true, err
		}
	}
	return "", false, fmt.Errorf("unsupported type %s", string(raw))
}

// avroLogical is a field type's logicalType ("" for none), inside a union too.
func avroLogical(raw json.RawMessage) string {
	var obj struct {
		LogicalType string `json:"logicalType"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.LogicalType
	}
	var union []json.RawMessage
	if json.Unmarshal(raw, &union) == nil && len(union) == 2 {
		return avroLogical(union[1])
	}
	return ""
}

// LoadEncoder reads the schema file written by the Python wrapper.
func LoadEncoder(path, fingerprintHex string) (*Encoder, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schema file: %v", err)
	}
	return NewEncoder(data, fingerprintHex)
}

func appendLong(dst []byte, v int64) []byte {
	u := uint64((v << 1) ^ (v >> 63)) // zig-zag
	return binary.AppendUvarint(dst, u)
}

func appendString(dst []byte, s []byte) []byte {
	dst = appendLong(dst, int64(len(s)))
	return append(dst, s...)
}

// Append encodes one flow; sourceFile is the pre-encoded Avro string of the file name.
func (e *Encoder) Append(dst []byte, f *Flow, sourceFile []byte) []byte {
	dst = append(dst, e.header...)
	var tmp [48]byte
	for _, fd := range e.fields {
		if fd.id == fNull {
			dst = append(dst, 0)
			continue
		}
		if fd.nullable {
			dst = append(dst, 2) // zig-zag(1): the non-null branch
		}
		switch fd.id {
		case fTimeStart:
			dst = appendLong(dst, f.TimeStart)
		case fTimeEnd:
			dst = appendLong(dst, f.TimeEnd)
		case fExporter:
			dst = appendLong(dst, int64(len(f.Exporter.Addr)))
			dst = append(dst, f.Exporter.Addr...)
		case fInputIf:
			dst = appendLong(dst, int64(f.InputIf))
		case fOutputIf:
			dst = appendLong(dst, int64(f.OutputIf))
		case fSrcAddr:
			dst = appendString(dst, appendAddr(tmp[:0], &f.SrcAddr, f.V6))
		case fDstAddr:
			dst = appendString(dst, appendAddr(tmp[:0], &f.DstAddr, f.V6))
		case fSrcPort:
			dst = appendLong(dst, int64(f.SrcPort))
		case fDstPort:
			dst = appendLong(dst, int64(f.DstPort))
		case fProto:
			dst = appendLong(dst, int64(f.Proto))
		case fTCPFlags:
			dst = appendLong(dst, int64(f.TCPFlags))
		case fTos:
			dst = appendLong(dst, int64(f.Tos))
		case fPackets:
			dst = appendLong(dst, int64(f.Packets))
		case fBytes:
			dst = appendLong(dst, int64(f.Bytes))
		case fSamplingRate:
			dst = appendLong(dst, int64(f.SamplingRate))
		case fSrcAS:
			dst = appendLong(dst, int64(f.SrcAS))
		case fDstAS:
			dst = appendLong(dst, int64(f.DstAS))
		case fSourceFile:
			dst = append(dst, sourceFile...)
		case fFileSeq:
			dst = appendLong(dst, f.Seq)
		case fSrcVlan:
			dst = appendLong(dst, int64(f.SrcVlan))
		case fDstVlan:
			dst = appendLong(dst, int64(f.DstVlan))
		}
	}
	return dst
}

// EncodeSourceFile pre-encodes the per-file constant string.
func EncodeSourceFile(name string) []byte { return appendString(nil, []byte(name)) }
