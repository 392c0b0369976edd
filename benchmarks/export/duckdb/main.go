// Command duckdb is the export benchmark's baseline, in a module of its
// own so that forkline's module never depends on cgo DuckDB: it copies a
// native dataset's episodes and steps shards to Parquet with DuckDB
// (COPY (SELECT ...) TO ... (FORMAT parquet)) and prints how many rows it
// wrote and how long it took, as JSON.
//
//	go run . -in runs/bench -out /tmp/duck
package main

import (
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
)

func main() {
	in := flag.String("in", "", "the native dataset")
	out := flag.String("out", "", "where the Parquet files go")
	threads := flag.Int("threads", 0, "DuckDB's threads (0: its default, every core)")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "duckdb: -in and -out are required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		fail(err)
	}
	defer db.Close()
	if *threads > 0 {
		if _, err := db.Exec(fmt.Sprintf("SET threads = %d", *threads)); err != nil {
			fail(err)
		}
	}
	began := time.Now()
	rows := map[string]int64{}
	for _, table := range []string{"episodes", "steps"} {
		q := fmt.Sprintf("COPY (SELECT * FROM read_parquet('%s')) TO '%s' (FORMAT parquet, COMPRESSION zstd)",
			filepath.Join(*in, table, "part-*.parquet"), filepath.Join(*out, table+".parquet"))
		res, err := db.Exec(q)
		if err != nil {
			fail(err)
		}
		n, _ := res.RowsAffected()
		rows[table] = n
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"rows": rows, "wall_s": time.Since(began).Seconds()})
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "duckdb:", err)
	os.Exit(1)
}
