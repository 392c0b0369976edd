package shard

import (
	"fmt"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
)

// Config tunes a Writer. A zero field takes its default (DefaultConfig), so
// Config{RollBytes: 1 << 20} is valid.
type Config struct {
	// RollBytes closes the open generation once its rows reach this many
	// bytes, estimated from the rows' uncompressed sizes (the files on disk
	// are smaller). Default 64 MiB.
	RollBytes int64
	// RollInterval closes the open generation once it is this old, so a
	// slow run still makes episodes durable. Default 60s.
	RollInterval time.Duration
	// RowGroupBytes flushes a table's Parquet row group once its buffered
	// rows reach this many bytes (estimated, uncompressed). It bounds the
	// writer's memory: about four row groups are buffered at most.
	// Default 8 MiB.
	RowGroupBytes int64
	// Compression is the shards' codec: "zstd" (default), "snappy" or
	// "none".
	Compression string
}

// Defaults.
const (
	DefaultRollBytes     = 64 << 20
	DefaultRollInterval  = 60 * time.Second
	DefaultRowGroupBytes = 8 << 20
	DefaultCompression   = "zstd"
)

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		RollBytes:     DefaultRollBytes,
		RollInterval:  DefaultRollInterval,
		RowGroupBytes: DefaultRowGroupBytes,
		Compression:   DefaultCompression,
	}
}

// withDefaults fills zero fields with their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.RollBytes == 0 {
		c.RollBytes = d.RollBytes
	}
	if c.RollInterval == 0 {
		c.RollInterval = d.RollInterval
	}
	if c.RowGroupBytes == 0 {
		c.RowGroupBytes = d.RowGroupBytes
	}
	if c.Compression == "" {
		c.Compression = d.Compression
	}
	return c
}

// Validate reports whether c is usable; zero fields count as their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.RollBytes < 0:
		return fmt.Errorf("shard: config: roll bytes %d is negative", c.RollBytes)
	case c.RollInterval < 0:
		return fmt.Errorf("shard: config: roll interval %s is negative", c.RollInterval)
	case c.RowGroupBytes < 0:
		return fmt.Errorf("shard: config: row group bytes %d is negative", c.RowGroupBytes)
	}
	if _, err := c.codec(); err != nil {
		return err
	}
	return nil
}

func (c Config) codec() (compress.Codec, error) {
	switch c.Compression {
	case "zstd", "":
		return &parquet.Zstd, nil
	case "snappy":
		return &parquet.Snappy, nil
	case "none":
		return &parquet.Uncompressed, nil
	}
	return nil, fmt.Errorf("shard: config: unknown compression %q (known: zstd, snappy, none)", c.Compression)
}
