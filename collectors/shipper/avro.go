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
	// revision 3 (issue 32): null when the record carried no such element (flowOpt*)
	fFlowDir
	fNextHop
	fBGPNextHop
	fSrcMask
	fDstMask
	fSrcMAC
	fDstMAC
	fMPLSLabels
	fIngressVRF
	fEgressVRF
	fFwdStatus
	fICMPType
	fICMPCode
	fSrcAddrNAT
	fDstAddrNAT
	fSrcPortNAT
	fDstPortNAT
	fNATEvent
	fBiflowHalf
	fNull // a nullable field the shipper does not know: always null
)

var knownFields = map[string]struct {
	id     fieldID
	string bool
	list   bool // an array of int (mpls_labels)
}{
	"time_start": {fTimeStart, false, false}, "time_end": {fTimeEnd, false, false}, "exporter": {fExporter, true, false},
	"input_if": {fInputIf, false, false}, "output_if": {fOutputIf, false, false},
	"src_addr": {fSrcAddr, true, false}, "dst_addr": {fDstAddr, true, false},
	"src_port": {fSrcPort, false, false}, "dst_port": {fDstPort, false, false}, "proto": {fProto, false, false},
	"tcp_flags": {fTCPFlags, false, false}, "tos": {fTos, false, false}, "packets": {fPackets, false, false},
	"bytes": {fBytes, false, false}, "sampling_rate": {fSamplingRate, false, false},
	"src_as": {fSrcAS, false, false}, "dst_as": {fDstAS, false, false},
	"source_file": {fSourceFile, true, false}, "file_seq": {fFileSeq, false, false},
	"src_vlan": {fSrcVlan, false, false}, "dst_vlan": {fDstVlan, false, false},
	"flow_direction": {fFlowDir, false, false}, "next_hop": {fNextHop, true, false},
	"bgp_next_hop": {fBGPNextHop, true, false}, "src_mask": {fSrcMask, false, false},
	"dst_mask": {fDstMask, false, false}, "src_mac": {fSrcMAC, true, false}, "dst_mac": {fDstMAC, true, false},
	"mpls_labels": {fMPLSLabels, false, true}, "ingress_vrf": {fIngressVRF, false, false},
	"egress_vrf": {fEgressVRF, false, false}, "forwarding_status": {fFwdStatus, false, false},
	"icmp_type": {fICMPType, false, false}, "icmp_code": {fICMPCode, false, false},
	"src_addr_nat": {fSrcAddrNAT, true, false}, "dst_addr_nat": {fDstAddrNAT, true, false},
	"src_port_nat": {fSrcPortNAT, false, false}, "dst_port_nat": {fDstPortNAT, false, false},
	"nat_event": {fNATEvent, false, false}, "biflow_half": {fBiflowHalf, false, false},
}

// optional reports whether a field may be absent from a record (revision 3: null then).
func (id fieldID) optional() bool { return id >= fFlowDir && id < fNull }

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
	Items   []string // an array's item type ("int", "long", "string"), else ""
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
			enc.Items = append(enc.Items, avroItems(f.Type))
			continue
		}
		if k.id.optional() && !nullable {
			return nil, fmt.Errorf("schema field %s: not nullable, the shipper writes null when a record lacks it", f.Name)
		}
		if k.list && base != "array" {
			return nil, fmt.Errorf("schema field %s: type %s, the shipper writes an array of int", f.Name, base)
		}
		if k.string && base != "string" {
			return nil, fmt.Errorf("schema field %s: type %s, the shipper writes a string", f.Name, base)
		}
		if !k.string && !k.list && base != "int" && base != "long" {
			return nil, fmt.Errorf("schema field %s: type %s, the shipper writes an int/long", f.Name, base)
		}
		if k.list && avroItems(f.Type) != "int" {
			return nil, fmt.Errorf("schema field %s: items %s, the shipper writes an array of int", f.Name, avroItems(f.Type))
		}
		enc.fields = append(enc.fields, encField{id: k.id, nullable: nullable})
		enc.Names = append(enc.Names, f.Name)
		enc.Base, enc.Logical = append(enc.Base, base), append(enc.Logical, avroLogical(f.Type))
		enc.Items = append(enc.Items, avroItems(f.Type))
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

// avroItems is an array type's item type ("int", "long", "string"), inside a union too; "" otherwise.
func avroItems(raw json.RawMessage) string {
	var obj struct {
		Type  string `json:"type"`
		Items string `json:"items"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		if obj.Type == "array" {
			return obj.Items
		}
		return ""
	}
	var union []json.RawMessage
	if json.Unmarshal(raw, &union) == nil && len(union) == 2 {
		return avroItems(union[1])
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
		if fd.id.optional() {
			dst = appendOptional(dst, f, fd.id)
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

// appendOptional encodes a revision-3 field: the union's null branch when the record
// lacks it, else the value (an array of int: one block of its items, then the end).
func appendOptional(dst []byte, f *Flow, id fieldID) []byte {
	if id == fMPLSLabels {
		if f.NMPLS == 0 {
			return append(dst, 0)
		}
		dst = appendLong(append(dst, 2), int64(f.NMPLS))
		for _, v := range f.MPLS[:f.NMPLS] {
			dst = appendLong(dst, int64(v))
		}
		return append(dst, 0)
	}
	if id.isString() {
		var tmp [48]byte
		s, ok := flowOptString(tmp[:0], f, id)
		if !ok {
			return append(dst, 0)
		}
		return appendString(append(dst, 2), s)
	}
	v, ok := flowOptInt(f, id)
	if !ok {
		return append(dst, 0)
	}
	return appendLong(append(dst, 2), v)
}

func (id fieldID) isString() bool {
	switch id {
	case fNextHop, fBGPNextHop, fSrcMAC, fDstMAC, fSrcAddrNAT, fDstAddrNAT:
		return true
	}
	return false
}

// flowOptInt is a revision-3 integer field's value and whether the record carried it.
// Fields nfcapd keeps inside an element (masks and direction in EXflowMisc) are the
// element's value whenever it is there; forwarding status 0 ("unknown" by IE 89, and
// what nfcapd stores when none was exported) reads null; ICMP type and code exist for
// ICMP and ICMPv6 only (dst_port = type*256+code).
func flowOptInt(f *Flow, id fieldID) (int64, bool) {
	switch id {
	case fFlowDir:
		return int64(f.FlowDir), f.has(exFlowMisc)
	case fSrcMask:
		return int64(f.SrcMask), f.has(exFlowMisc)
	case fDstMask:
		return int64(f.DstMask), f.has(exFlowMisc)
	case fIngressVRF:
		return int64(f.IngressVRF), f.HasVRF
	case fEgressVRF:
		return int64(f.EgressVRF), f.HasVRF
	case fFwdStatus:
		return int64(f.FwdStatus), f.FwdStatus != 0
	case fICMPType:
		return int64(f.DstPort >> 8), f.Proto == 1 || f.Proto == 58
	case fICMPCode:
		return int64(f.DstPort & 0xFF), f.Proto == 1 || f.Proto == 58
	case fSrcPortNAT:
		return int64(f.SrcPortNAT), f.has(exNSELXlatePt)
	case fDstPortNAT:
		return int64(f.DstPortNAT), f.has(exNSELXlatePt)
	case fNATEvent:
		return int64(f.NATEvent), f.has(exNELCommon)
	case fBiflowHalf:
		return int64(f.BiflowHalf), true
	}
	return 0, false
}

// flowOptString appends a revision-3 text field (an address or a MAC) to dst; false when
// the record lacks it (dst unchanged).
func flowOptString(dst []byte, f *Flow, id fieldID) ([]byte, bool) {
	switch id {
	case fNextHop:
		if f.has(exIPNextV4) || f.has(exIPNextV6) {
			return appendAddr(dst, &f.NextHop, f.NextHopV6), true
		}
	case fBGPNextHop:
		if f.has(exBGPNextV4) || f.has(exBGPNextV6) {
			return appendAddr(dst, &f.BGPNextHop, f.BGPNextHopV6), true
		}
	case fSrcMAC:
		if f.SrcMAC != 0 {
			return appendMAC(dst, f.SrcMAC), true
		}
	case fDstMAC:
		if f.DstMAC != 0 {
			return appendMAC(dst, f.DstMAC), true
		}
	case fSrcAddrNAT:
		if f.has(exNSELXlate4) || f.has(exNSELXlate6) {
			return appendAddr(dst, &f.SrcNAT, f.NATV6), true
		}
	case fDstAddrNAT:
		if f.has(exNSELXlate4) || f.has(exNSELXlate6) {
			return appendAddr(dst, &f.DstNAT, f.NATV6), true
		}
	}
	return dst, false
}

// appendMAC appends a 48-bit MAC as aa:bb:cc:dd:ee:ff.
func appendMAC(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 5; i >= 0; i-- {
		b := byte(v >> (8 * i))
		dst = append(dst, digits[b>>4], digits[b&15])
		if i > 0 {
			dst = append(dst, ':')
		}
	}
	return dst
}

// EncodeSourceFile pre-encodes the per-file constant string.
func EncodeSourceFile(name string) []byte { return appendString(nil, []byte(name)) }
