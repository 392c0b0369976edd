package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/schemas"
)

// The oracle of every test here is encoding/json: the bytes json.Encoder
// writes for an Episode with HTML escaping off, which is what this
// package wrote before its lines were appended by hand.
func oracleLine(t testing.TB, ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) ([]byte, error) {
	t.Helper()
	if steps == nil {
		steps = []schemas.StepRow{}
	}
	if rewards == nil {
		rewards = []schemas.RewardRow{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(Episode{EpisodeRow: ep, Steps: steps, Rewards: rewards})
	return buf.Bytes(), err
}

func handLine(t testing.TB, ep schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	err := enc.Encode(ep, steps, rewards)
	require.NoError(t, enc.Flush())
	return buf.Bytes(), err
}

// filler sets every exported field of a value by reflection, recursing into
// structs, pointers and slices. full sets each to something omitempty
// keeps (pointers set, slices and strings non-empty, numbers non-zero);
// otherwise each pointer, slice and number may also be nil, empty or zero.
// A field of a kind it does not know fails the test: a new field of a new
// type is filled here before the encoder can be checked against it.
type filler struct {
	t    testing.TB
	rng  *rand.Rand
	full bool
}

func (f *filler) fill(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			f.fill(v.Field(i), path+"."+sf.Name)
		}
	case reflect.Pointer:
		if !f.full && f.rng.IntN(3) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), path)
		v.Set(p)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes(f.bytes())
			return
		}
		n := 1 + f.rng.IntN(4)
		if !f.full {
			switch f.rng.IntN(6) {
			case 0, 1:
				v.SetZero() // nil
				return
			case 2:
				n = 0
			}
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		v.SetString(f.string())
	case reflect.Bool:
		v.SetBool(f.full || f.rng.IntN(2) == 0)
	case reflect.Int32, reflect.Int64, reflect.Int:
		v.SetInt(f.int(v.Type().Bits()))
	case reflect.Float64:
		v.SetFloat(f.float64())
	case reflect.Float32:
		v.SetFloat(float64(f.float32()))
	default:
		f.t.Fatalf("filler: %s is a %s, which the filler (and maybe the hand encoder) does not know", path, v.Type())
	}
}

// Pieces of strings: every class encoding/json escapes or replaces, the
// HTML characters it leaves alone with escaping off, runs long enough for
// the eight-byte scan, and invalid UTF-8 of every shape.
var stringPieces = func() []string {
	p := []string{
		`"`, `\`, "<", ">", "&", "/", "'", "\x7f", " ", "a", "Z9",
		"\u2028", "\u2029", "\u2027", "\u202a", "é", "中文", "😀", "\ufffd", "\u00a0",
		"\x80", "\xff", "\xc3", "\xe2\x80", "\xf0\x9f\x98", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\xfe\xfe",
		"0123456789abcdef", "the quick brown fox jumps over", strings.Repeat("x", 33),
		`{"kind":"exec","cmd":"echo $((1+2))"}`, "line one\nline two\r\n\ttabbed",
	}
	for c := range 0x20 {
		p = append(p, string(rune(c)))
	}
	return p
}()

func (f *filler) string() string {
	n := f.rng.IntN(12)
	if f.full {
		n++
	}
	var sb strings.Builder
	for range n {
		if f.rng.IntN(4) == 0 {
			// plain ASCII of any length, printable or not
			for range f.rng.IntN(20) {
				sb.WriteByte(byte(f.rng.IntN(0x80)))
			}
			continue
		}
		sb.WriteString(stringPieces[f.rng.IntN(len(stringPieces))])
	}
	if f.full && sb.Len() == 0 {
		sb.WriteString("x")
	}
	return sb.String()
}

func (f *filler) bytes() []byte {
	if !f.full {
		switch f.rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
	}
	b := make([]byte, 1+f.rng.IntN(40))
	for i := range b {
		b[i] = byte(f.rng.Uint32())
	}
	return b
}

func (f *filler) int(bits int) int64 {
	var v int64
	switch f.rng.IntN(7) {
	case 0:
		v = 0
	case 1:
		v = -1
	case 6: // a digit count's edge: 10^k, 10^k-1
		v = int64(math.Pow10(f.rng.IntN(bits*3/10+1))) - int64(f.rng.IntN(2))
	case 2:
		v = math.MinInt64 >> (64 - bits)
	case 3:
		v = math.MaxInt64 >> (64 - bits)
	default:
		v = int64(f.rng.Uint64()) >> (64 - bits)
	}
	if f.full && v == 0 {
		v = 7
	}
	return v
}

func (f *filler) float64() float64 {
	var v float64
	switch f.rng.IntN(12) {
	case 0:
		v = 0
	case 1:
		v = math.Copysign(0, -1)
	case 2: // the edges of encoding/json's exponent form
		v = []float64{1e-6, 1e21, math.Nextafter(1e-6, 0), math.Nextafter(1e21, 0), math.Nextafter(1e21, math.Inf(1)),
			1e-7, 1e-9, 1e-10, 1e-100, 1e20, 1e22, 1e100, 123456789e13}[f.rng.IntN(13)]
	case 3:
		v = []float64{math.SmallestNonzeroFloat64, math.MaxFloat64, 5e-324, 2.2250738585072014e-308, 0.1, 1.0 / 3, 2.5, 1, 100}[f.rng.IntN(9)]
	case 4: // random bits: every exponent
		for {
			v = math.Float64frombits(f.rng.Uint64())
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				break
			}
		}
	case 5:
		v = float64(f.rng.IntN(1_000_000))
	case 6, 7: // a decimal of a few places, or a float next to one
		v = decimalNear(f.rng.Int64N(1e16)>>f.rng.IntN(50), f.rng.IntN(9), f.rng.IntN(5)-2)
	default: // a millisecond figure of any magnitude
		v = f.rng.Float64() * math.Pow(10, float64(f.rng.IntN(50)-25))
	}
	if f.rng.IntN(3) == 0 {
		v = -v
	}
	if f.full && v == 0 {
		v = 0.25
	}
	return v
}

func (f *filler) float32() float32 {
	var v float32
	switch f.rng.IntN(10) {
	case 0:
		v = 0
	case 1:
		v = float32(math.Copysign(0, -1))
	case 2:
		v = []float32{1e-6, 1e21, math.Nextafter32(1e-6, 0), math.Nextafter32(1e21, 0), math.Nextafter32(1e21, float32(math.Inf(1))),
			1e-7, 1e-9, 1e-30, 1e20, 1e30, math.SmallestNonzeroFloat32, math.MaxFloat32}[f.rng.IntN(12)]
	case 3:
		for {
			v = math.Float32frombits(f.rng.Uint32())
			if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
				break
			}
		}
	default: // a logprob
		v = -float32(f.rng.ExpFloat64())
	}
	if f.full && v == 0 {
		v = -0.5
	}
	return v
}

// episode fills an episode, its steps and its rewards.
func (f *filler) episode() (schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) {
	var ep Episode
	f.fill(reflect.ValueOf(&ep).Elem(), "Episode")
	return ep.EpisodeRow, ep.Steps, ep.Rewards
}

// The hand encoder writes encoding/json's bytes for random episodes with
// every field set at random: strings of every escape class and invalid
// UTF-8, floats of every magnitude and -0, nil and empty slices, nil and
// set pointers.
func TestHandEncoderMatchesEncodingJSON(t *testing.T) {
	for seed := range uint64(3000) {
		f := &filler{t: t, rng: rand.New(rand.NewPCG(seed, 0x6a736f6e6c)), full: seed%5 == 0}
		ep, steps, rewards := f.episode()
		want, err := oracleLine(t, ep, steps, rewards)
		require.NoError(t, err, "seed %d", seed)
		got, err := handLine(t, ep, steps, rewards)
		require.NoError(t, err, "seed %d", seed)
		if !bytes.Equal(want, got) {
			i := 0
			for i < len(want) && i < len(got) && want[i] == got[i] {
				i++
			}
			lo := max(0, i-80)
			t.Fatalf("seed %d: first difference at byte %d\nencoding/json: …%q\nhand:          …%q",
				seed, i, want[lo:min(len(want), i+80)], got[lo:min(len(got), i+80)])
		}
	}
}

// jsonNames lists the keys encoding/json writes for t's fields.
func jsonNames(t reflect.Type) []string {
	var names []string
	for sf := range t.Fields() {
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if sf.Anonymous && name == "" {
			names = append(names, jsonNames(sf.Type)...)
			continue
		}
		if name == "" {
			name = sf.Name
		}
		names = append(names, name)
	}
	return names
}

// assertEveryFieldSet fails when the full filler left a field zero: then a
// field the encoder misses could go unseen.
func assertEveryFieldSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				assertEveryFieldSet(t, v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	case reflect.Pointer:
		require.False(t, v.IsNil(), path)
		assertEveryFieldSet(t, v.Elem(), path)
	case reflect.Slice:
		require.NotZero(t, v.Len(), path)
		if v.Type().Elem().Kind() == reflect.Struct {
			for i := range v.Len() {
				assertEveryFieldSet(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	default:
		require.False(t, v.IsZero(), path)
	}
}

// A field added to EpisodeRow, StepRow or RewardRow that the hand encoder
// does not write fails here: every field is set to a value omitempty keeps,
// and the line must hold a key for each json field of each row, in struct
// order, as encoding/json writes it.
func TestHandEncoderWritesEveryField(t *testing.T) {
	f := &filler{t: t, rng: rand.New(rand.NewPCG(1, 2)), full: true}
	var full Episode
	f.fill(reflect.ValueOf(&full).Elem(), "Episode")
	assertEveryFieldSet(t, reflect.ValueOf(full), "Episode")

	got, err := handLine(t, full.EpisodeRow, full.Steps, full.Rewards)
	require.NoError(t, err)
	want, err := oracleLine(t, full.EpisodeRow, full.Steps, full.Rewards)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	keys := func(obj []byte) []string {
		dec := json.NewDecoder(bytes.NewReader(obj))
		tok, err := dec.Token()
		require.NoError(t, err)
		require.Equal(t, json.Delim('{'), tok)
		var ks []string
		for dec.More() {
			tok, err := dec.Token()
			require.NoError(t, err)
			ks = append(ks, tok.(string))
			var skip json.RawMessage
			require.NoError(t, dec.Decode(&skip))
		}
		return ks
	}
	require.Equal(t, jsonNames(reflect.TypeFor[Episode]()), keys(got))
	require.Len(t, keys(got), reflect.TypeFor[schemas.EpisodeRow]().NumField()+2)
	var line struct {
		Steps   []json.RawMessage `json:"step_rows"`
		Rewards []json.RawMessage `json:"rewards"`
	}
	require.NoError(t, json.Unmarshal(got, &line))
	require.Len(t, line.Steps, len(full.Steps))
	for _, s := range line.Steps {
		require.Equal(t, jsonNames(reflect.TypeFor[schemas.StepRow]()), keys(s))
		require.Len(t, keys(s), reflect.TypeFor[schemas.StepRow]().NumField())
	}
	require.Len(t, line.Rewards, len(full.Rewards))
	for _, r := range line.Rewards {
		require.Equal(t, jsonNames(reflect.TypeFor[schemas.RewardRow]()), keys(r))
		require.Len(t, keys(r), reflect.TypeFor[schemas.RewardRow]().NumField())
	}
}

// A NaN or an infinity is an error, as encoding/json makes it, naming the
// episode and the field; nothing of the episode is written, and the lines
// before and after it are.
func TestHandEncoderRefusesNaNAndInfinity(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(-1)
	cases := []struct {
		name    string
		ep      schemas.EpisodeRow
		steps   []schemas.StepRow
		rewards []schemas.RewardRow
		field   string
	}{
		{name: "episode", ep: schemas.EpisodeRow{VerifyMS: nan}, field: "verify_ms: json: unsupported value: NaN"},
		{name: "episode logprob", ep: schemas.EpisodeRow{ResponseLogprobs: []float32{-1, float32(math.Inf(1))}}, field: "response_logprobs: json: unsupported value: +Inf"},
		{name: "step", steps: []schemas.StepRow{{}, {EnvMS: inf}}, field: "step_rows[1].env_ms: json: unsupported value: -Inf"},
		{name: "step latency", steps: []schemas.StepRow{{ModelMS: &nan}}, field: "step_rows[0].model_latency_ms"},
		{name: "step logprob", steps: []schemas.StepRow{{ResponseLogprobs: []float32{float32(nan)}}}, field: "step_rows[0].response_logprobs"},
		{name: "reward", rewards: []schemas.RewardRow{{}, {}, {Value: &inf}}, field: "rewards[2].value: json: unsupported value: -Inf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.ep.EpisodeID = "ep-bad"
			_, oracleErr := oracleLine(t, c.ep, c.steps, c.rewards)
			require.Error(t, oracleErr, "encoding/json refuses it too")

			var buf bytes.Buffer
			enc := NewEncoder(&buf)
			require.NoError(t, enc.Encode(schemas.EpisodeRow{EpisodeID: "before"}, nil, nil))
			err := enc.Encode(c.ep, c.steps, c.rewards)
			require.ErrorContains(t, err, "jsonl: episode ep-bad: "+c.field)
			require.NoError(t, enc.Encode(schemas.EpisodeRow{EpisodeID: "after"}, nil, nil))
			require.NoError(t, enc.Flush())
			before, _ := oracleLine(t, schemas.EpisodeRow{EpisodeID: "before"}, nil, nil)
			after, _ := oracleLine(t, schemas.EpisodeRow{EpisodeID: "after"}, nil, nil)
			require.Equal(t, string(before)+string(after), buf.String())
		})
	}
}

// Many episodes through one Encoder, past its buffer many times, come out
// as encoding/json's lines, in order, whole.
func TestEncoderStreamMatchesEncodingJSON(t *testing.T) {
	var want bytes.Buffer
	oracle := json.NewEncoder(&want)
	oracle.SetEscapeHTML(false)
	var got bytes.Buffer
	enc := NewEncoder(&got)
	f := &filler{t: t, rng: rand.New(rand.NewPCG(7, 7))}
	for want.Len() < 4*flushAt {
		ep, steps, rewards := f.episode()
		line, err := oracleLine(t, ep, steps, rewards)
		require.NoError(t, err)
		want.Write(line)
		require.NoError(t, enc.Encode(ep, steps, rewards))
	}
	require.Less(t, got.Len(), want.Len(), "the last lines wait for Flush")
	require.NotZero(t, got.Len(), "a full buffer is written out")
	require.NoError(t, enc.Flush())
	require.Equal(t, want.String(), got.String())
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	w.n++
	return 0, errors.New("disk full")
}

// A write error is returned, naming the episode whose Encode met it, and
// by every later Encode and Flush without another write.
func TestEncoderWriteErrorSticks(t *testing.T) {
	fw := &failWriter{}
	enc := NewEncoder(fw)
	big := schemas.EpisodeRow{EpisodeID: "big", Answer: strings.Repeat("a", flushAt)}
	err := enc.Encode(big, nil, nil)
	require.ErrorContains(t, err, "jsonl: episode big: disk full")
	require.ErrorContains(t, enc.Encode(schemas.EpisodeRow{EpisodeID: "next"}, nil, nil), "jsonl: episode next: disk full")
	require.ErrorContains(t, enc.Flush(), "disk full")
	assert.Equal(t, 1, fw.n)
}

// jsonString is encoding/json's encoding of s with HTML escaping off.
func jsonString(t testing.TB, v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return strings.TrimSuffix(buf.String(), "\n")
}

func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, math.Copysign(0, -1), 1e-6, 1e21, 1e-7, 5e-324, math.MaxFloat64, -0.1} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			if got, want := string(appendFloat(nil, v, 64)), jsonString(t, v); got != want {
				t.Fatalf("float64 %v: hand %s, encoding/json %s", v, got, want)
			}
		}
		v32 := math.Float32frombits(uint32(bits))
		if !math.IsNaN(float64(v32)) && !math.IsInf(float64(v32), 0) {
			if got, want := string(appendFloat(nil, float64(v32), 32)), jsonString(t, v32); got != want {
				t.Fatalf("float32 %v: hand %s, encoding/json %s", v32, got, want)
			}
		}
	})
}

// benchEpisode is a 3-step shell episode shaped as forkline collects them
// (a command, a file written, done; a verify reward), with a command
// output of about 430 bytes; tokens adds a model turn to each step: a
// prompt of about 270 ids and a response of 35 ids with logprobs.
func benchEpisode(tokens bool) (schemas.EpisodeRow, []schemas.StepRow, []schemas.RewardRow) {
	id, group := "9d0568aa5d20b00923441741ddb64266", "05ded27dfa74beeb8988d6eb62de9b02"
	ep := schemas.EpisodeRow{EpisodeID: id, RunID: "20261206T071027Z-b69f5117d595", TaskID: "export-bench",
		TaskHash: "08e9bd7411d3d9e31d8f11c923a5893dd462bab2d0ec3ff37f835934eb3689db", Attempt: 1, Provider: "local",
		GoldenID: "cp-08e9bd7411d3", ResetStrategy: "fork+standby", ResetOrigin: "overlay", ResetMS: 0.001,
		GoldenBuildMS: 159.7, GoldenBytes: 31, ExitReason: "done", Answer: "3", Steps: 3, StartedAt: 1796083200000,
		DurationMS: 12.1, PolicyMS: 0.002, EnvMS: 12, VerifyMS: 3.8, GroupID: &group,
		PromptIDs: []int32{}, ResponseIDs: []int32{}, ResponseMask: []int32{}, ResponseLogprobs: []float32{}}
	var out strings.Builder
	for i := range 12 {
		fmt.Fprintf(&out, "-rw-r--r-- 1 user user %5d Dec  6 07:10 file-%02d.txt\n", 1000+i*37, i)
	}
	steps := []schemas.StepRow{
		{ActionKind: "exec", ActionJSON: `{"kind":"exec","cmd":"ls -l \u003c notes.txt"}`, Output: out.String(), OutputBytes: int64(out.Len()), EnvMS: 2},
		{ActionKind: "write_file", ActionJSON: `{"kind":"write_file","path":"count.txt","content":"3\n"}`, Output: "wrote 2 bytes to count.txt", OutputBytes: 26, ExitCode: -1, EnvMS: 4},
		{ActionKind: "done", ActionJSON: `{"kind":"done","answer":"3"}`, ExitCode: -1, EnvMS: 6},
	}
	for i := range steps {
		s := &steps[i]
		s.EpisodeID, s.StepIndex, s.TaskID, s.StartedAt, s.PolicyMS = id, int32(i), "export-bench", 1796083200000+int64(7*i), 0.0003
		s.PromptIDs, s.ResponseIDs, s.ResponseMask, s.ResponseLogprobs = []int32{}, []int32{}, []int32{}, []float32{}
		if tokens {
			model, text, finish := "qwen3-8b", "I will run the command.", "tool_calls"
			s.Model, s.ModelText, s.FinishReason = &model, &text, &finish
			for j := range 270 + 40*i {
				s.PromptIDs = append(s.PromptIDs, int32(151644+j*7919%150000))
			}
			for j := range 35 {
				s.ResponseIDs = append(s.ResponseIDs, int32(j*104729%150000))
				s.ResponseMask = append(s.ResponseMask, 1)
				s.ResponseLogprobs = append(s.ResponseLogprobs, -float32(j%7)*0.0371-1e-5)
			}
			ms := 48.25
			s.ModelMS = &ms
		}
	}
	v := 1.0
	rewards := []schemas.RewardRow{{EpisodeID: id, Name: "verify", Value: &v, Source: `test "$(cat count.txt)" = 3`}}
	return ep, steps, rewards
}

// BenchmarkEncode compares the hand encoder with encoding/json (the
// encoder this package used before) on the same episodes.
func BenchmarkEncode(b *testing.B) {
	for _, tokens := range []bool{false, true} {
		name := "shell"
		if tokens {
			name = "tokens"
		}
		ep, steps, rewards := benchEpisode(tokens)
		line, err := oracleLine(b, ep, steps, rewards)
		require.NoError(b, err)
		hand, err := handLine(b, ep, steps, rewards)
		require.NoError(b, err)
		require.Equal(b, string(line), string(hand))
		b.Run(name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			enc := json.NewEncoder(io.Discard)
			enc.SetEscapeHTML(false)
			for b.Loop() {
				if err := enc.Encode(Episode{EpisodeRow: ep, Steps: steps, Rewards: rewards}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/hand", func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			enc := NewEncoder(io.Discard)
			for b.Loop() {
				if err := enc.Encode(ep, steps, rewards); err != nil {
					b.Fatal(err)
				}
			}
			if err := enc.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func FuzzAppendInt32(f *testing.F) {
	for _, v := range []int32{0, 1, -1, 9, 10, 99, 100, math.MaxInt32, math.MinInt32} {
		f.Add(v)
	}
	p := int32(1)
	for range 9 {
		p *= 10
		f.Add(p - 1)
		f.Add(p)
		f.Add(-p)
		f.Add(1 - p)
	}
	f.Fuzz(func(t *testing.T, v int32) {
		if got, want := string(appendInt32([]byte("x"), v)), "x"+jsonString(t, v); got != want {
			t.Fatalf("%d: hand %s, encoding/json %s", v, got, want)
		}
	})
}

// decimalNear is n/10^k, moved ulps floats up or down.
func decimalNear(n int64, k, ulps int) float64 {
	v := float64(n) / math.Pow10(k)
	for ; ulps > 0; ulps-- {
		v = math.Nextafter(v, math.Inf(1))
	}
	for ; ulps < 0; ulps++ {
		v = math.Nextafter(v, math.Inf(-1))
	}
	return v
}

// The fast path for short decimals (durations such as 12, 159.7, 0.0003)
// writes what encoding/json writes, at them, next to them, and at the
// edges of its range.
func TestAppendFloatShortDecimals(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(v float64) {
		if got, want := string(appendFloat(nil, v, 64)), jsonString(t, v); got != want {
			t.Fatalf("%v (%b): hand %s, encoding/json %s", v, math.Float64bits(v), got, want)
		}
	}
	for _, v := range []float64{1e-6, 1e-4, 1e9, 999999999.999999, 999999999.9999999, 0.000001, 0.0000015, 123456789.123456, 1e-5, 0.1 + 0.2, 1.0 / 3, 12.000006, 0.000301} {
		check(v)
		for ulps := -3; ulps <= 3; ulps++ {
			check(decimalNear(int64(v*1e6), 6, ulps))
			check(-decimalNear(int64(v*1e6), 6, ulps))
		}
	}
	for n := range int64(20000) {
		for k := range 9 {
			check(float64(n) / math.Pow10(k))
		}
	}
	for range 300000 {
		n := rng.Int64N(1e17) >> rng.IntN(57)
		if rng.IntN(2) == 0 {
			n = -n
		}
		check(decimalNear(n, rng.IntN(10), rng.IntN(7)-3))
	}
}

func FuzzAppendFloatDecimal(f *testing.F) {
	f.Add(int64(1597), uint8(1), int8(0))
	f.Add(int64(3), uint8(4), int8(1))
	f.Add(int64(-15970), uint8(2), int8(-1))
	f.Fuzz(func(t *testing.T, n int64, k uint8, ulps int8) {
		v := decimalNear(n, int(k%10), int(ulps%4))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		if got, want := string(appendFloat(nil, v, 64)), jsonString(t, v); got != want {
			t.Fatalf("%v: hand %s, encoding/json %s", v, got, want)
		}
	})
}

// A line larger than the buffer kept (an episode with screenshots) is
// written whole, and its buffer is not kept after the flush.
func TestEncoderDropsAnOversizedBuffer(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	ep := schemas.EpisodeRow{EpisodeID: "big", StartScreenshot: bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, keepAt/3)}
	require.NoError(t, enc.Encode(ep, nil, nil))
	require.LessOrEqual(t, cap(enc.buf), keepAt, "flushed, as it is past flushAt, and dropped")
	require.NoError(t, enc.Flush())
	want, err := oracleLine(t, ep, nil, nil)
	require.NoError(t, err)
	require.Equal(t, want, buf.Bytes())
}
