package model

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/extensions"
)

// Feature is a node of a Hugging Face Features tree: Value, List, Struct or
// Image.
type Feature interface{ isFeature() }

// Value is a scalar feature; the string is its datasets dtype: string,
// binary, bool, int8, int16, int32, int64, float32 or float64.
type Value string

// List is a variable-length list feature.
type List struct{ Item Feature }

// Struct is a nested-dict feature; field order is significant (it is the
// Arrow struct's child order).
type Struct []Field

// Image is datasets' Image feature, stored as struct<bytes: binary, path:
// string>. forkline always embeds the bytes.
type Image struct{}

// JSON is datasets' Json feature (datasets ≥ 4.7): a JSON value stored as
// a UTF-8 string in Arrow's canonical arrow.json extension type (a Parquet
// JSON column), decoded by datasets into the exact object — every key the
// value has and no other, which no Arrow struct can express for values of
// different shapes (messages, tool calls, tool schemas).
type JSON struct{}

func (Value) isFeature()  {}
func (List) isFeature()   {}
func (Struct) isFeature() {}
func (Image) isFeature()  {}
func (JSON) isFeature()   {}

// Field is a named feature.
type Field struct {
	Name string
	Type Feature
}

// Features is a dataset's top-level features, in column order.
type Features []Field

// MetadataKey is the Arrow schema (and Parquet key/value) metadata key under
// which datasets looks for features.
const MetadataKey = "huggingface"

// arrowTypes maps each dtype to the Arrow type datasets uses for it.
var arrowTypes = map[Value]arrow.DataType{
	"string":  arrow.BinaryTypes.String,
	"binary":  arrow.BinaryTypes.Binary,
	"bool":    arrow.FixedWidthTypes.Boolean,
	"int8":    arrow.PrimitiveTypes.Int8,
	"int16":   arrow.PrimitiveTypes.Int16,
	"int32":   arrow.PrimitiveTypes.Int32,
	"int64":   arrow.PrimitiveTypes.Int64,
	"float32": arrow.PrimitiveTypes.Float32,
	"float64": arrow.PrimitiveTypes.Float64,
}

// ArrowType returns the Arrow type datasets builds for f: every struct
// child and list item nullable, list items named "item", strings utf8 (not
// large_utf8), Image as struct<bytes: binary, path: string>.
func ArrowType(f Feature) arrow.DataType {
	switch f := f.(type) {
	case Value:
		t, ok := arrowTypes[f]
		if !ok {
			panic(fmt.Sprintf("model: unknown dtype %q", string(f)))
		}
		return t
	case List:
		return arrow.ListOf(ArrowType(f.Item)) // item field "item", nullable
	case Struct:
		fields := make([]arrow.Field, len(f))
		for i, c := range f {
			fields[i] = arrow.Field{Name: c.Name, Type: ArrowType(c.Type), Nullable: true}
		}
		return arrow.StructOf(fields...)
	case Image:
		return imageType
	case JSON:
		return jsonType
	}
	panic(fmt.Sprintf("model: unknown feature %T", f))
}

// jsonType is arrow.json over utf8, the type pyarrow's pa.json_() is and
// datasets' Json feature compares a file's field with.
var jsonType = func() arrow.DataType {
	t, err := extensions.NewJSONType(arrow.BinaryTypes.String)
	if err != nil {
		panic(err)
	}
	return t
}()

var imageType = arrow.StructOf(
	arrow.Field{Name: "bytes", Type: arrow.BinaryTypes.Binary, Nullable: true},
	arrow.Field{Name: "path", Type: arrow.BinaryTypes.String, Nullable: true},
)

// ArrowSchema returns the Arrow schema of fs, every field nullable, with the
// features JSON under MetadataKey.
func (fs Features) ArrowSchema() *arrow.Schema {
	fields := make([]arrow.Field, len(fs))
	for i, f := range fs {
		fields[i] = arrow.Field{Name: f.Name, Type: ArrowType(f.Type), Nullable: true}
	}
	md := arrow.NewMetadata([]string{MetadataKey}, []string{fs.MetadataJSON()})
	return arrow.NewSchema(fields, &md)
}

// MetadataJSON is the value stored under MetadataKey:
// {"info": {"features": ...}}.
func (fs Features) MetadataJSON() string {
	return `{"info":{"features":` + string(fs.JSON()) + `}}`
}

// JSON encodes fs as datasets' Features.to_dict does, in field order, with
// the encoding both datasets 3.x and 4.x read: Value as {"dtype", "_type":
// "Value"}, Image as {"_type": "Image"}, a list as a one-element JSON array
// [item] (not {"_type": "List"}, which 3.x rejects), a struct as an object.
func (fs Features) JSON() []byte {
	var b strings.Builder
	writeStructJSON(&b, Struct(fs))
	return []byte(b.String())
}

func writeFeatureJSON(b *strings.Builder, f Feature) {
	switch f := f.(type) {
	case Value:
		b.WriteString(`{"dtype":`)
		b.WriteString(jsonString(string(f)))
		b.WriteString(`,"_type":"Value"}`)
	case List:
		b.WriteByte('[')
		writeFeatureJSON(b, f.Item)
		b.WriteByte(']')
	case Struct:
		writeStructJSON(b, f)
	case Image:
		b.WriteString(`{"_type":"Image"}`)
	case JSON:
		b.WriteString(`{"_type":"Json"}`)
	default:
		panic(fmt.Sprintf("model: unknown feature %T", f))
	}
}

func writeStructJSON(b *strings.Builder, s Struct) {
	b.WriteByte('{')
	for i, c := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(c.Name))
		b.WriteByte(':')
		writeFeatureJSON(b, c.Type)
	}
	b.WriteByte('}')
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// YAML returns fs as the dataset card's dataset_info.features list
// (datasets' Features._to_yaml_list), indented by indent spaces:
//
//   - name: episode_id
//     dtype: string
//   - name: prompt_ids
//     list: int32
//   - name: screenshot
//     dtype: image
func (fs Features) YAML(indent int) string {
	var b strings.Builder
	writeYAMLFields(&b, []Field(fs), indent)
	return b.String()
}

func writeYAMLFields(b *strings.Builder, fields []Field, indent int) {
	pad := strings.Repeat(" ", indent)
	for _, f := range fields {
		fmt.Fprintf(b, "%s- name: %s\n", pad, f.Name)
		writeYAMLBody(b, f.Type, indent+2)
	}
}

// writeYAMLBody writes the keys that describe f (without its name).
func writeYAMLBody(b *strings.Builder, f Feature, indent int) {
	pad := strings.Repeat(" ", indent)
	switch f := f.(type) {
	case Value:
		fmt.Fprintf(b, "%sdtype: %s\n", pad, string(f))
	case Image:
		fmt.Fprintf(b, "%sdtype: image\n", pad)
	case JSON:
		// datasets' _to_yaml_list writes a feature without parameters as its
		// snake-case name; _from_yaml_list reads it back as Json.
		fmt.Fprintf(b, "%sdtype: json\n", pad)
	case Struct:
		fmt.Fprintf(b, "%sstruct:\n", pad)
		writeYAMLFields(b, f, indent)
	case List:
		switch item := f.Item.(type) {
		case Value:
			fmt.Fprintf(b, "%slist: %s\n", pad, string(item))
		case Image:
			fmt.Fprintf(b, "%slist: image\n", pad)
		case JSON:
			fmt.Fprintf(b, "%slist: json\n", pad)
		case Struct:
			fmt.Fprintf(b, "%slist:\n", pad)
			writeYAMLFields(b, item, indent)
		case List:
			fmt.Fprintf(b, "%slist:\n", pad)
			writeYAMLBody(b, item, indent+2)
		}
	default:
		panic(fmt.Sprintf("model: unknown feature %T", f))
	}
}
