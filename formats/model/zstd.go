package model

import (
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// arrow-go's zstd codec takes its block encoders from a sync.Pool, which
// the GC empties; a new encoder allocates (and the runtime clears) a 16 MB
// history the first time it compresses. An export allocates fast enough to
// run the GC several times per row group, so nearly every column chunk
// paid for a fresh encoder: 8 % of the CPU of export -to verl-sft.
//
// keptZstd is that codec with encoders that outlive a GC: the same
// options as arrow-go's (zero frames, the level asked for, concurrency 1,
// all literals entropy-coded) and the same EncodeAll, so the bytes are the
// same, and up to keptEncoders of them per level are kept between blocks.
// Everything else is arrow-go's codec. It is registered for the process
// when this package is loaded (compress.RegisterCodec is meant to be
// called from init).
type keptZstd struct {
	compress.Codec
	mu    sync.Mutex
	kept  map[zstd.EncoderLevel][]*zstd.Encoder
	owner compress.Codec
}

// keptEncoders per level: one per encoding goroutine a busy export has
// (a table writer encodes on one; hf writes a file per split).
const keptEncoders = 4

func init() {
	orig, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		return // not built in: leave it so
	}
	compress.RegisterCodec(compress.Codecs.Zstd, &keptZstd{Codec: orig, owner: orig, kept: map[zstd.EncoderLevel][]*zstd.Encoder{}})
}

func (z *keptZstd) Encode(dst, src []byte) []byte {
	return z.EncodeLevel(dst, src, compress.DefaultCompressionLevel)
}

func (z *keptZstd) EncodeLevel(dst, src []byte, level int) []byte {
	l := zstd.EncoderLevelFromZstd(level)
	if level == compress.DefaultCompressionLevel {
		l = zstd.SpeedDefault
	}
	enc := z.get(l)
	if enc == nil {
		var err error
		enc, err = zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true))
		if err != nil {
			return z.owner.EncodeLevel(dst, src, level)
		}
	}
	out := enc.EncodeAll(src, dst[:0])
	z.put(l, enc)
	return out
}

func (z *keptZstd) get(l zstd.EncoderLevel) *zstd.Encoder {
	z.mu.Lock()
	defer z.mu.Unlock()
	k := z.kept[l]
	if len(k) == 0 {
		return nil
	}
	enc := k[len(k)-1]
	z.kept[l] = k[:len(k)-1]
	return enc
}

func (z *keptZstd) put(l zstd.EncoderLevel, enc *zstd.Encoder) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(z.kept[l]) < keptEncoders {
		z.kept[l] = append(z.kept[l], enc)
	}
}

// DecodeWithError keeps arrow-go's error-returning decode (compress.ErrorCodec).
func (z *keptZstd) DecodeWithError(dst, src []byte) ([]byte, error) {
	return compress.Decode(z.owner, dst, src)
}

// The streaming side is arrow-go's (compress.StreamingCodec).

func (z *keptZstd) NewReader(r io.Reader) io.ReadCloser {
	return z.owner.(compress.StreamingCodec).NewReader(r)
}

func (z *keptZstd) NewWriter(w io.Writer) io.WriteCloser {
	return z.owner.(compress.StreamingCodec).NewWriter(w)
}

func (z *keptZstd) NewWriterLevel(w io.Writer, level int) (io.WriteCloser, error) {
	return z.owner.(compress.StreamingCodec).NewWriterLevel(w, level)
}
