package main

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// A small generic Avro single-object encoder for records the shipper writes a few of per
// file (exporter health), from the schema JSON the Python side generates; values by field
// name. The FLOW record, a hundred thousand a second, has its own encoder (avro.go).

type rowEncoder struct {
	header []byte
	fields []struct {
		name, typ string
		nullable  bool
	}
}

func newRowEncoder(schemaFile, fingerprintHex string, known map[string]any) (*rowEncoder, error) {
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		return nil, fmt.Errorf("health schema file: %v", err)
	}
	fp, err := hex.DecodeString(fingerprintHex)
	if err != nil || len(fp) != 8 {
		return nil, fmt.Errorf("health fingerprint %q: want 16 hex digits (8 bytes)", fingerprintHex)
	}
	var schema struct {
		Fields []struct {
			Name string          `json:"name"`
			Type json.RawMessage `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal(data, &schema); err != nil || len(schema.Fields) == 0 {
		return nil, fmt.Errorf("health schema %s: not a record schema (%v)", schemaFile, err)
	}
	enc := &rowEncoder{header: append([]byte{0xC3, 0x01}, fp...)}
	for _, f := range schema.Fields {
		t, nullable, err := avroType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("health schema field %s: %v", f.Name, err)
		}
		if _, ok := known[f.Name]; !ok && !nullable {
			return nil, fmt.Errorf("health schema field %s (%s) is unknown to the shipper and not nullable: update collectors/shipper/health.go", f.Name, t)
		}
		enc.fields = append(enc.fields, struct {
			name, typ string
			nullable  bool
		}{f.Name, t, nullable})
	}
	return enc, nil
}

func (e *rowEncoder) encode(v map[string]any) ([]byte, error) {
	out := append([]byte(nil), e.header...)
	for _, f := range e.fields {
		val := v[f.name]
		if f.nullable {
			if val == nil {
				out = append(out, 0)
				continue
			}
			out = append(out, 2)
		}
		switch x := val.(type) {
		case int64:
			if f.typ != "long" && f.typ != "int" {
				return nil, fmt.Errorf("field %s: integer for Avro %s", f.name, f.typ)
			}
			out = appendLong(out, x)
		case float64:
			if f.typ != "double" {
				return nil, fmt.Errorf("field %s: float for Avro %s", f.name, f.typ)
			}
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x))
		case string:
			out = appendString(out, []byte(x))
		case bool:
			b := byte(0)
			if x {
				b = 1
			}
			out = append(out, b)
		default:
			return nil, fmt.Errorf("field %s: no value for Avro %s", f.name, f.typ)
		}
	}
	return out, nil
}
