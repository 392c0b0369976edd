// Package tabletest checks what formats/model's TableWriter (and the targets
// built on it: formats/hf, formats/verl) write, with implementations
// independent of the one that wrote it: Parquet files are read with
// parquet-go (they are written with Apache arrow-go), Arrow IPC streams and
// the ARROW:schema stored in Parquet files are decoded by a small Arrow IPC
// reader written here from the format specification, Hugging Face feature
// JSON is turned into Arrow types by rules written here from datasets'
// documentation, not by package model, and a dataset card's front matter
// is read as datasets reads it.
//
// It is a test helper package: tests import it, programs do not.
package tabletest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Type is an Arrow data type as this package sees it, with the field it
// belongs to: its name and nullability.
type Type struct {
	Name     string // field name ("item"/"element" for list items)
	Nullable bool
	Kind     string // utf8, large_utf8, binary, bool, int8, int16, int32, int64, float16, float32, float64, list, large_list, struct, or "other:<n>"
	Children []Type // list: one item; struct: the fields in order
	// Extension is the Arrow extension type's name (ARROW:extension:name,
	// "arrow.json" for datasets' Json), "" for none; Kind is then the
	// storage type.
	Extension string
}

// String renders t like pyarrow does, roughly: list<item: int32>.
func (t Type) String() string {
	if t.Extension != "" {
		s := t
		s.Extension = ""
		return "extension<" + t.Extension + "[storage_type=" + s.String() + "]>"
	}
	switch t.Kind {
	case "list", "large_list":
		c := t.Children[0]
		return fmt.Sprintf("%s<%s: %s%s>", t.Kind, c.Name, c.String(), notNull(c))
	case "struct":
		parts := make([]string, len(t.Children))
		for i, c := range t.Children {
			parts[i] = fmt.Sprintf("%s: %s%s", c.Name, c.String(), notNull(c))
		}
		return "struct<" + strings.Join(parts, ", ") + ">"
	}
	return t.Kind
}

func notNull(t Type) string {
	if t.Nullable {
		return ""
	}
	return " not null"
}

// Equal compares two fields as pyarrow's Field.__eq__ does for datasets'
// check: name, nullability and type, recursively into struct children. The
// names of list items are compared only when strictListNames is set
// (current Arrow ignores them; pyarrow writes "item").
func Equal(a, b Type, strictListNames bool) error {
	return equal(a, b, strictListNames, a.Name)
}

func equal(a, b Type, strict bool, path string) error {
	if a.Name != b.Name {
		return fmt.Errorf("%s: name %q vs %q", path, a.Name, b.Name)
	}
	if a.Nullable != b.Nullable {
		return fmt.Errorf("%s: nullable %v vs %v", path, a.Nullable, b.Nullable)
	}
	if a.Kind != b.Kind || a.Extension != b.Extension {
		return fmt.Errorf("%s: type %s vs %s", path, a, b)
	}
	if len(a.Children) != len(b.Children) {
		return fmt.Errorf("%s: %d vs %d children (%s vs %s)", path, len(a.Children), len(b.Children), a, b)
	}
	for i := range a.Children {
		ca, cb := a.Children[i], b.Children[i]
		if (a.Kind == "list" || a.Kind == "large_list") && !strict {
			cb.Name = ca.Name
		}
		if err := equal(ca, cb, strict, path+"."+ca.Name); err != nil {
			return err
		}
	}
	return nil
}

// FeatureTypes turns the features of a "huggingface" metadata value
// ({"info": {"features": {...}}}) into the Arrow fields datasets builds for
// them, in order: every field, struct child and list item nullable, list
// items named "item", Value dtypes mapped as datasets maps them, Image as
// struct<bytes: binary, path: string>. Both list encodings are read: a
// one-element JSON array and {"_type": "List"|"Sequence", "feature": x}.
func FeatureTypes(metadata string) ([]Type, error) {
	var top struct {
		Info struct {
			Features json.RawMessage `json:"features"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(metadata), &top); err != nil {
		return nil, fmt.Errorf("tabletest: huggingface metadata: %w", err)
	}
	return FeaturesJSONTypes(top.Info.Features)
}

// FeaturesJSONTypes is FeatureTypes for a bare features object (as in
// dataset_info.json).
func FeaturesJSONTypes(features json.RawMessage) ([]Type, error) {
	names, values, err := orderedObject(features)
	if err != nil {
		return nil, fmt.Errorf("tabletest: features: %w", err)
	}
	out := make([]Type, len(names))
	for i := range names {
		t, err := featureType(values[i])
		if err != nil {
			return nil, fmt.Errorf("tabletest: feature %s: %w", names[i], err)
		}
		t.Name, t.Nullable = names[i], true
		out[i] = t
	}
	return out, nil
}

var dtypes = map[string]string{
	"string": "utf8", "large_string": "large_utf8", "binary": "binary", "bool": "bool",
	"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
	"float16": "float16", "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
}

func featureType(raw json.RawMessage) (Type, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) > 0 && raw[0] == '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return Type{}, err
		}
		if len(items) != 1 {
			return Type{}, fmt.Errorf("a list feature needs exactly one element, has %d", len(items))
		}
		return listOf(items[0])
	}
	names, values, err := orderedObject(raw)
	if err != nil {
		return Type{}, err
	}
	var typ string
	for i, n := range names {
		if n == "_type" {
			if err := json.Unmarshal(values[i], &typ); err != nil {
				return Type{}, err
			}
		}
	}
	get := func(key string) json.RawMessage {
		for i, n := range names {
			if n == key {
				return values[i]
			}
		}
		return nil
	}
	switch typ {
	case "":
		t := Type{Kind: "struct"}
		for i, n := range names {
			c, err := featureType(values[i])
			if err != nil {
				return Type{}, fmt.Errorf("%s: %w", n, err)
			}
			c.Name, c.Nullable = n, true
			t.Children = append(t.Children, c)
		}
		return t, nil
	case "Value":
		var d string
		if err := json.Unmarshal(get("dtype"), &d); err != nil {
			return Type{}, fmt.Errorf("tabletest: a Value feature's dtype: %w", err)
		}
		k, ok := dtypes[d]
		if !ok {
			return Type{}, fmt.Errorf("dtype %q not known here", d)
		}
		return Type{Kind: k}, nil
	case "Image":
		return Type{Kind: "struct", Children: []Type{
			{Name: "bytes", Nullable: true, Kind: "binary"},
			{Name: "path", Nullable: true, Kind: "utf8"},
		}}, nil
	case "Json":
		return Type{Kind: "utf8", Extension: "arrow.json"}, nil
	case "List", "Sequence":
		if get("length") != nil {
			return Type{}, fmt.Errorf("fixed-length lists are not checked here")
		}
		return listOf(get("feature"))
	}
	return Type{}, fmt.Errorf("feature type %q not known here", typ)
}

func listOf(item json.RawMessage) (Type, error) {
	c, err := featureType(item)
	if err != nil {
		return Type{}, fmt.Errorf("list item: %w", err)
	}
	c.Name, c.Nullable = "item", true
	return Type{Kind: "list", Children: []Type{c}}, nil
}

// orderedObject decodes a JSON object's keys and raw values in file order.
func orderedObject(raw json.RawMessage) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("want an object, got %v", tok)
	}
	var names []string
	var values []json.RawMessage
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		names = append(names, k.(string))
		values = append(values, v)
	}
	return names, values, nil
}
