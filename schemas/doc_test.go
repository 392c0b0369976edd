package schemas_test

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/forkline/forkline/schemas"
	"github.com/parquet-go/parquet-go"
)

// docColumn is one row of a table section in docs/SCHEMA.md.
type docColumn struct {
	name, typ, nullable string
	line                int
}

// parseSchemaDoc returns, per "## Table: name" section of docs/SCHEMA.md,
// the rows of its Markdown table.
func parseSchemaDoc(t *testing.T) map[string][]docColumn {
	t.Helper()
	f, err := os.Open("../docs/SCHEMA.md")
	if err != nil {
		t.Fatalf("docs/SCHEMA.md: %v", err)
	}
	defer f.Close()
	out := map[string][]docColumn{}
	table := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			table = ""
			if name, ok := strings.CutPrefix(line, "## Table: "); ok {
				table = strings.TrimSpace(name)
				if _, dup := out[table]; dup {
					t.Errorf("docs/SCHEMA.md:%d: table %s documented twice", n, table)
				}
				out[table] = nil
			}
			continue
		}
		if table == "" || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 5 {
			t.Errorf("docs/SCHEMA.md:%d: want 5 cells (column, type, nullable, unit, meaning): %q", n, line)
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[4] == "" {
			t.Errorf("docs/SCHEMA.md:%d: column %s has no meaning", n, cells[0])
		}
		out[table] = append(out[table], docColumn{name: strings.Trim(cells[0], "`"), typ: cells[1], nullable: cells[2], line: n})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// docType spells a column's Parquet type the way docs/SCHEMA.md does.
func docType(f parquet.Field) string {
	lt := f.Type().LogicalType()
	if lt != nil && lt.String() == "LIST" {
		return "LIST<" + docType(f.Fields()[0].Fields()[0]) + ">"
	}
	s := f.Type().Kind().String()
	if lt != nil && lt.String() == "STRING" {
		s += " (STRING)"
	}
	return s
}

// TestSchemaDocMatchesColumns keeps docs/SCHEMA.md and the row types in
// step: every column is documented with its type and nullability, and every
// documented column exists.
func TestSchemaDocMatchesColumns(t *testing.T) {
	doc := parseSchemaDoc(t)
	for table := range doc {
		if !slices.Contains(schemas.Tables, table) {
			t.Errorf("docs/SCHEMA.md documents table %q, which does not exist", table)
		}
	}
	for _, table := range schemas.Tables {
		cols, err := schemas.Columns(table)
		if err != nil {
			t.Fatal(err)
		}
		sch, err := schemas.Schema(table)
		if err != nil {
			t.Fatal(err)
		}
		documented, ok := doc[table]
		if !ok {
			t.Errorf("docs/SCHEMA.md has no section \"## Table: %s\"", table)
			continue
		}
		byName := map[string]docColumn{}
		for _, c := range documented {
			if _, dup := byName[c.name]; dup {
				t.Errorf("docs/SCHEMA.md:%d: %s.%s documented twice", c.line, table, c.name)
			}
			byName[c.name] = c
			if !slices.Contains(cols, c.name) {
				t.Errorf("docs/SCHEMA.md:%d: %s.%s is documented but is not a column", c.line, table, c.name)
			}
		}
		for _, f := range sch.Fields() {
			c, ok := byName[f.Name()]
			if !ok {
				t.Errorf("column %s.%s is not documented in docs/SCHEMA.md", table, f.Name())
				continue
			}
			if want := docType(f); c.typ != want {
				t.Errorf("docs/SCHEMA.md:%d: %s.%s type %q, the schema says %q", c.line, table, c.name, c.typ, want)
			}
			want := "no"
			if f.Optional() {
				want = "yes"
			}
			if c.nullable != want {
				t.Errorf("docs/SCHEMA.md:%d: %s.%s nullable %q, the schema says %q", c.line, table, c.name, c.nullable, want)
			}
		}
		if len(sch.Fields()) != len(cols) {
			t.Errorf("%s: schema has %d fields, Columns %d", table, len(sch.Fields()), len(cols))
		}
	}
}
