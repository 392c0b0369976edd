package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// The DuckDB oracle is built once per source: its executable is kept in the
// user's cache directory under the hash of its sources, because linking
// DuckDB's static library takes tens of seconds.
var duckdb struct {
	once sync.Once
	path string
	err  error
}

// duckdbSource is internal/oracle/duckdb, found from this file's place in
// the repository.
func duckdbSource() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "oracle", "duckdb")
}

// BuildDuckDB builds (or finds, built before from the same sources) the
// DuckDB oracle program and returns its path.
func BuildDuckDB() (string, error) {
	duckdb.once.Do(func() {
		src := duckdbSource()
		h := sha256.New()
		for _, f := range []string{"main.go", "go.mod", "go.sum"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				duckdb.err = err
				return
			}
			h.Write(b)
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		exe := filepath.Join(cache, "forkline", "duckdb-"+hex.EncodeToString(h.Sum(nil))[:16])
		if _, err := os.Stat(exe); err == nil {
			duckdb.path = exe
			return
		}
		if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
			duckdb.err = err
			return
		}
		tmp := fmt.Sprintf("%s.%d.tmp", exe, os.Getpid())
		build := exec.Command("go", "build", "-o", tmp, ".")
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			duckdb.err = fmt.Errorf("go build in %s: %v\n%s", src, err, out)
			return
		}
		if err := os.Rename(tmp, exe); err != nil {
			duckdb.err = err
			return
		}
		duckdb.path = exe
	})
	return duckdb.path, duckdb.err
}

// NeedDuckDB ends the test unless the DuckDB oracle can be built, and
// returns its path: run it with -sql QUERY; it prints the rows as a JSON
// array of objects.
func NeedDuckDB(t testing.TB) string {
	t.Helper()
	var exe string
	Need(t, DuckDB, func() error {
		var err error
		exe, err = BuildDuckDB()
		return err
	})
	return exe
}
