package tabletest

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Card is what datasets reads from a README.md's YAML front matter.
type Card struct {
	Features []Type            // dataset_info.features, as Arrow fields
	Splits   map[string]int64  // dataset_info.splits: name → num_examples
	Files    map[string]string // configs[default].data_files: split → path glob
}

// ReadCard parses a dataset card's front matter and turns its features
// into Arrow fields by the rules of datasets' Features._from_yaml_list:
// "dtype: X" is a Value (or, for "image", an Image), "list: X" a list of
// the dtype X, "list: [fields]" a list of structs, "struct: [fields]" a
// struct.
func ReadCard(readme []byte) (*Card, error) {
	text := string(readme)
	if !strings.HasPrefix(text, "---\n") {
		return nil, errors.New("tabletest: card has no YAML front matter")
	}
	front, _, ok := strings.Cut(text[4:], "\n---\n")
	if !ok {
		return nil, errors.New("tabletest: card's front matter is not closed")
	}
	var doc struct {
		Configs []struct {
			ConfigName string `yaml:"config_name"`
			DataFiles  []struct {
				Split string `yaml:"split"`
				Path  string `yaml:"path"`
			} `yaml:"data_files"`
		} `yaml:"configs"`
		DatasetInfo struct {
			Features []yaml.Node `yaml:"features"`
			Splits   []struct {
				Name        string `yaml:"name"`
				NumExamples int64  `yaml:"num_examples"`
			} `yaml:"splits"`
		} `yaml:"dataset_info"`
	}
	if err := yaml.Unmarshal([]byte(front), &doc); err != nil {
		return nil, fmt.Errorf("tabletest: card YAML: %w", err)
	}
	c := &Card{Splits: map[string]int64{}, Files: map[string]string{}}
	for _, cfg := range doc.Configs {
		if cfg.ConfigName == "" {
			return nil, errors.New("tabletest: a config without config_name (datasets rejects it)")
		}
		for _, df := range cfg.DataFiles {
			c.Files[df.Split] = df.Path
		}
	}
	for _, s := range doc.DatasetInfo.Splits {
		c.Splits[s.Name] = s.NumExamples
	}
	for i := range doc.DatasetInfo.Features {
		f, err := yamlField(&doc.DatasetInfo.Features[i])
		if err != nil {
			return nil, err
		}
		c.Features = append(c.Features, f)
	}
	return c, nil
}

// yamlField reads one "- name: ..." entry.
func yamlField(n *yaml.Node) (Type, error) {
	m, err := yamlMap(n)
	if err != nil {
		return Type{}, err
	}
	var name string
	if err := m["name"].Decode(&name); err != nil || name == "" {
		return Type{}, fmt.Errorf("tabletest: card feature without a name at line %d", n.Line)
	}
	t, err := yamlBody(m, name)
	t.Name, t.Nullable = name, true
	return t, err
}

func yamlMap(n *yaml.Node) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("tabletest: card line %d: want a mapping", n.Line)
	}
	m := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		m[n.Content[i].Value] = n.Content[i+1]
	}
	return m, nil
}

func yamlBody(m map[string]*yaml.Node, name string) (Type, error) {
	switch {
	case m["dtype"] != nil:
		return yamlDtype(m["dtype"].Value, name)
	case m["struct"] != nil:
		return yamlStruct(m["struct"], name)
	case m["list"] != nil:
		v := m["list"]
		var item Type
		var err error
		switch v.Kind {
		case yaml.ScalarNode:
			item, err = yamlDtype(v.Value, name)
		case yaml.SequenceNode:
			item, err = yamlStruct(v, name)
		case yaml.MappingNode:
			var inner map[string]*yaml.Node
			if inner, err = yamlMap(v); err == nil {
				item, err = yamlBody(inner, name)
			}
		}
		if err != nil {
			return Type{}, err
		}
		item.Name, item.Nullable = "item", true
		return Type{Kind: "list", Children: []Type{item}}, nil
	}
	return Type{}, fmt.Errorf("tabletest: card feature %s has no dtype, list or struct", name)
}

func yamlDtype(d, name string) (Type, error) {
	if d == "image" {
		return Type{Kind: "struct", Children: []Type{
			{Name: "bytes", Nullable: true, Kind: "binary"},
			{Name: "path", Nullable: true, Kind: "utf8"},
		}}, nil
	}
	if d == "json" {
		// Value("json") raises in datasets, and _from_yaml_list then takes
		// the dtype as a feature's snake-case name: Json.
		return Type{Kind: "utf8", Extension: "arrow.json"}, nil
	}
	k, ok := dtypes[d]
	if !ok {
		return Type{}, fmt.Errorf("tabletest: card feature %s: dtype %q not known here", name, d)
	}
	return Type{Kind: k}, nil
}

func yamlStruct(n *yaml.Node, name string) (Type, error) {
	if n.Kind != yaml.SequenceNode {
		return Type{}, fmt.Errorf("tabletest: card feature %s: struct wants a list of fields", name)
	}
	t := Type{Kind: "struct"}
	for _, c := range n.Content {
		f, err := yamlField(c)
		if err != nil {
			return Type{}, err
		}
		t.Children = append(t.Children, f)
	}
	return t, nil
}
