// Command duckdb runs one SQL query with DuckDB and prints its rows as JSON
// (an array of objects, one per row, keyed by column name): the oracle the
// tests compare forkline's own readers with (forkline view's episode list
// filters against the same query over the same Parquet shards). It is a
// module of its own so that forkline's module never depends on cgo DuckDB;
// the tests build it with go build (internal/testenv's duckdb component).
//
//	go run . -sql "SELECT count(*) AS n FROM read_parquet('runs/demo/episodes/part-*.parquet')"
package main

import (
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	_ "github.com/duckdb/duckdb-go/v2"
)

func main() {
	query := flag.String("sql", "", "the query")
	flag.Parse()
	if *query == "" {
		fmt.Fprintln(os.Stderr, "duckdb: -sql is required")
		os.Exit(2)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		fail(err)
	}
	defer db.Close()
	rows, err := db.Query(*query)
	if err != nil {
		fail(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		fail(err)
	}
	out := []map[string]any{}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			fail(err)
		}
		row := map[string]any{}
		for i, c := range cols {
			row[c] = vals[i]
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "duckdb:", err)
	os.Exit(1)
}
