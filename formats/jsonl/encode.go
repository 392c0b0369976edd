package jsonl

import (
	"encoding/base64"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"

	"github.com/forkline/forkline/formats/model"
	"github.com/forkline/forkline/schemas"
)

// The line is appended by hand, field by field, in the bytes encoding/json
// writes for an Episode with HTML escaping off (json.Encoder with
// SetEscapeHTML(false)): the keys in struct order, omitempty fields left out
// when empty, nil slices and pointers null, []byte as standard base64,
// strings escaped as encoding/json escapes them and floats in its format.
// encoding/json is the oracle: encode_test.go fills every field of the rows
// with random values and compares the two byte for byte, and fails when a
// field of the row types has no key here. A field added to a row type is
// added here in its place.

// lineWriter appends one line. A float JSON cannot hold (NaN, ±Inf) is
// recorded, the first one only, and the line is refused by appendLine.
type lineWriter struct {
	b        []byte
	badField string // key of the first NaN or infinite float, "" when none
	badValue string
	badIn    string // the nested row holding it, "" for the episode's own
}

// appendLine appends ep's line, steps and rewards nested, with its newline.
// It returns b extended even on error; the caller drops the partial line.
func appendLine(b []byte, ep *schemas.EpisodeRow, steps []schemas.StepRow, rewards []schemas.RewardRow) ([]byte, error) {
	w := lineWriter{b: b}
	w.episode(ep)
	w.b = append(w.b, `,"step_rows":[`...)
	for i := range steps {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.step(&steps[i])
		if w.badField != "" && w.badIn == "" {
			w.badIn = "step_rows[" + strconv.Itoa(i) + "]."
		}
	}
	w.b = append(w.b, `],"rewards":[`...)
	for i := range rewards {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.reward(&rewards[i])
		if w.badField != "" && w.badIn == "" {
			w.badIn = "rewards[" + strconv.Itoa(i) + "]."
		}
	}
	w.b = append(w.b, "]}\n"...)
	if w.badField != "" {
		return w.b, fmt.Errorf("%s%s: json: unsupported value: %s", w.badIn, w.badField, w.badValue)
	}
	return w.b, nil
}

func (w *lineWriter) episode(r *schemas.EpisodeRow) {
	w.str(`{"episode_id":`, r.EpisodeID)
	w.str(`,"run_id":`, r.RunID)
	w.str(`,"task_id":`, r.TaskID)
	w.str(`,"task_hash":`, r.TaskHash)
	w.int(`,"repeat":`, int64(r.Repeat))
	w.int(`,"seed":`, r.Seed)
	w.int(`,"replica":`, int64(r.Replica))
	w.int(`,"attempt":`, int64(r.Attempt))
	w.str(`,"provider":`, r.Provider)
	w.str(`,"golden_id":`, r.GoldenID)
	w.str(`,"reset_strategy":`, r.ResetStrategy)
	w.str(`,"reset_origin":`, r.ResetOrigin)
	w.f64(`,"reset_ms":`, r.ResetMS)
	w.f64(`,"golden_build_ms":`, r.GoldenBuildMS)
	w.int(`,"golden_bytes":`, r.GoldenBytes)
	w.str(`,"exit_reason":`, r.ExitReason)
	w.str(`,"detail":`, r.Detail)
	w.str(`,"answer":`, r.Answer)
	w.int(`,"steps":`, int64(r.Steps))
	w.int(`,"started_at_ms":`, r.StartedAt)
	w.f64(`,"duration_ms":`, r.DurationMS)
	w.f64(`,"policy_ms":`, r.PolicyMS)
	w.f64(`,"env_ms":`, r.EnvMS)
	w.f64(`,"verify_ms":`, r.VerifyMS)
	w.bool(`,"token_drift":`, r.TokenDrift)
	w.optStr(`,"token_cut":`, r.TokenCut)
	w.ints(`,"prompt_ids":`, r.PromptIDs)
	w.ints(`,"response_ids":`, r.ResponseIDs)
	w.ints(`,"response_mask":`, r.ResponseMask)
	w.f32s(`,"response_logprobs":`, r.ResponseLogprobs)
	w.int(`,"token_turns":`, int64(r.TokenTurns))
	w.optStr(`,"start_output":`, r.StartOutput)
	w.optBytes(`,"start_screenshot":`, r.StartScreenshot)
	w.optStr(`,"start_screenshot_sha256":`, r.StartScreenHash)
	w.optInt(`,"start_screenshot_width":`, r.StartScreenW)
	w.optInt(`,"start_screenshot_height":`, r.StartScreenH)
	w.optStr(`,"start_a11y_tree":`, r.StartAXTree)
	w.optStr(`,"metadata":`, r.Metadata)
	w.optStr(`,"parent_episode_id":`, r.ParentEpisodeID)
	w.optIntPtr(`,"branch_step":`, r.BranchStep)
	w.optIntPtr(`,"branch_index":`, r.BranchIndex)
	w.optStr(`,"group_id":`, r.GroupID)
	w.optStr(`,"agent":`, r.Agent)
}

func (w *lineWriter) step(r *schemas.StepRow) {
	w.str(`{"episode_id":`, r.EpisodeID)
	w.int(`,"step_index":`, int64(r.StepIndex))
	w.str(`,"task_id":`, r.TaskID)
	w.int(`,"started_at_ms":`, r.StartedAt)
	w.str(`,"action_kind":`, r.ActionKind)
	w.str(`,"action_json":`, r.ActionJSON)
	w.str(`,"output":`, r.Output)
	w.optBytes(`,"output_raw":`, r.OutputRaw)
	w.int(`,"output_bytes":`, r.OutputBytes)
	w.bool(`,"truncated":`, r.Truncated)
	w.int(`,"exit_code":`, int64(r.ExitCode))
	w.bool(`,"is_error":`, r.IsError)
	w.str(`,"error_kind":`, r.ErrorKind)
	w.bool(`,"timed_out":`, r.TimedOut)
	w.optBytes(`,"screenshot":`, r.Screenshot)
	if r.ScreenHash != "" {
		w.str(`,"screenshot_sha256":`, r.ScreenHash)
	}
	w.optInt(`,"screenshot_width":`, r.ScreenW)
	w.optInt(`,"screenshot_height":`, r.ScreenH)
	if r.AXTree != "" {
		w.str(`,"a11y_tree":`, r.AXTree)
	}
	w.f64(`,"policy_ms":`, r.PolicyMS)
	w.f64(`,"env_ms":`, r.EnvMS)
	w.optStr(`,"model":`, r.Model)
	w.optStr(`,"model_text":`, r.ModelText)
	w.optStr(`,"reasoning":`, r.Reasoning)
	w.optStr(`,"tool_calls":`, r.ToolCalls)
	w.optStr(`,"finish_reason":`, r.FinishReason)
	w.ints(`,"prompt_ids":`, r.PromptIDs)
	w.ints(`,"response_ids":`, r.ResponseIDs)
	w.ints(`,"response_mask":`, r.ResponseMask)
	w.f32s(`,"response_logprobs":`, r.ResponseLogprobs)
	w.optIntPtr(`,"prompt_tokens":`, r.PromptTokens)
	w.optIntPtr(`,"completion_tokens":`, r.CompletionTokens)
	if r.ModelMS != nil {
		w.f64(`,"model_latency_ms":`, *r.ModelMS)
	}
	w.optStr(`,"token_path":`, r.TokenPath)
	w.optStr(`,"token_endpoints":`, r.TokenEndpoints)
	w.optStr(`,"chat_template_sha256":`, r.ChatTemplateSHA256)
	w.strs(`,"prompt_images":`, r.PromptImages)
	w.optStr(`,"harness_input":`, r.HarnessInput)
	w.optStr(`,"history_cut":`, r.HistoryCut)
	w.optStr(`,"tools_sha256":`, r.ToolsSHA256)
	w.b = append(w.b, '}')
}

func (w *lineWriter) reward(r *schemas.RewardRow) {
	w.str(`{"episode_id":`, r.EpisodeID)
	w.optIntPtr(`,"step_index":`, r.StepIndex)
	w.str(`,"name":`, r.Name)
	if r.Value != nil {
		w.f64(`,"value":`, *r.Value)
	}
	w.str(`,"source":`, r.Source)
	w.str(`,"detail":`, r.Detail)
	w.int(`,"exit_code":`, int64(r.ExitCode))
	w.b = append(w.b, '}')
}

// Each method below appends key (the separator, the quoted name and the
// colon) and the value; the opt* ones append nothing for what omitempty
// leaves out: a nil pointer, a zero int32, an empty []byte.

func (w *lineWriter) str(key, s string) {
	w.b = model.AppendJSONString(append(w.b, key...), s)
}

func (w *lineWriter) optStr(key string, s *string) {
	if s != nil {
		w.b = model.AppendJSONString(append(w.b, key...), *s)
	}
}

func (w *lineWriter) strs(key string, ss []string) {
	w.b = append(w.b, key...)
	if ss == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '[')
	for i, s := range ss {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = model.AppendJSONString(w.b, s)
	}
	w.b = append(w.b, ']')
}

func (w *lineWriter) int(key string, v int64) {
	w.b = strconv.AppendInt(append(w.b, key...), v, 10)
}

func (w *lineWriter) optInt(key string, v int32) {
	if v != 0 {
		w.int(key, int64(v))
	}
}

func (w *lineWriter) optIntPtr(key string, v *int32) {
	if v != nil {
		w.int(key, int64(*v))
	}
}

func (w *lineWriter) ints(key string, vs []int32) {
	b := append(w.b, key...)
	if vs == nil {
		w.b = append(b, "null"...)
		return
	}
	b = append(slices.Grow(b, 2+12*len(vs)), '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt32(b, v)
	}
	w.b = append(b, ']')
}

func (w *lineWriter) bool(key string, v bool) {
	w.b = strconv.AppendBool(append(w.b, key...), v)
}

func (w *lineWriter) optBytes(key string, v []byte) {
	if len(v) == 0 {
		return
	}
	w.b = append(append(w.b, key...), '"')
	w.b = base64.StdEncoding.AppendEncode(w.b, v)
	w.b = append(w.b, '"')
}

func (w *lineWriter) f64(key string, f float64) {
	w.b = append(w.b, key...)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		w.bad(key, f, 64)
		w.b = append(w.b, "null"...) // the line is refused; this keeps it parseable while it is built
		return
	}
	w.b = appendFloat(w.b, f, 64)
}

func (w *lineWriter) f32s(key string, vs []float32) {
	b := append(w.b, key...)
	if vs == nil {
		w.b = append(b, "null"...)
		return
	}
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		f := float64(v)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			w.bad(key, f, 32)
			b = append(b, "null"...)
			continue
		}
		b = appendFloat(b, f, 32)
	}
	w.b = append(b, ']')
}

// bad records the first float JSON cannot hold, named by its key.
func (w *lineWriter) bad(key string, f float64, size int) {
	if w.badField != "" {
		return
	}
	w.badField = key[2 : len(key)-2] // ,"name": → name
	w.badValue = strconv.FormatFloat(f, 'g', -1, size)
}

// appendFloat appends a finite f as encoding/json's float encoder does: like
// JavaScript's number to string, the shortest decimal that reads back as
// the same float of its size (size: 32 or 64 bits), in exponent form below 1e-6
// and from 1e21 (compared as that size), the exponent's leading zero cut.
func appendFloat(b []byte, f float64, size int) []byte {
	abs := math.Abs(f)
	if size == 64 && abs >= 1e-6 && abs < 1e9 {
		if b, ok := appendShortDecimal(b, f); ok {
			return b
		}
	}
	format := byte('f')
	if abs != 0 {
		if size == 64 && (abs < 1e-6 || abs >= 1e21) || size == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, size)
	if format == 'e' {
		// e-09 → e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// decimalScale[k] is 10^k, exact as a float64.
var decimalScale = [...]float64{1, 10, 100, 1e3, 1e4, 1e5, 1e6}

// appendShortDecimal appends f, 1e-6 ≤ |f| < 1e9, when it is a decimal of
// at most six places (a duration such as 12, 159.7 or 0.000301), and
// reports whether it was; strconv.AppendFloat(f, 'f', -1, 64) writes the
// same bytes, for less.
//
// Why they are the same. strconv writes the shortest decimal that reads
// back as f: the fewest significant digits (ties do not arise here). The
// decimal written, n/10^k, reads back as f (the float64 division of n,
// exact below 2^53, by 10^k, exact too, rounds as a correct parse does),
// has exactly k places (n%10 != 0 when k > 0: a trailing zero means fewer
// places would do, and that is left to strconv), and k is the fewest places
// tried that read back as f. Below 1e9 the decimals that read back as f lie
// within an ulp of it, under 1.2e-7 apart, so no two of at most six places
// do: any other has more places than n/10^k, and as it has its leading
// digit in the same place (or, just below a power of ten, a run of nines
// as long as a float's precision), more significant digits. So n/10^k is
// strconv's decimal, and in plain notation ('f': the digits, the point and
// k digits after it) its bytes. The tests check it against encoding/json
// at, next to and between such decimals.
func appendShortDecimal(b []byte, f float64) ([]byte, bool) {
	for k, p := range decimalScale {
		n := int64(math.RoundToEven(f * p)) // how it rounds a tie does not matter: n is checked
		if float64(n)/p != f {
			continue
		}
		if k > 0 && n%10 == 0 {
			return b, false
		}
		if n < 0 {
			b = append(b, '-')
			n = -n
		}
		u := uint64(n)
		scale := uint64(p)
		b = strconv.AppendUint(b, u/scale, 10)
		if k == 0 {
			return b, true
		}
		frac := u % scale
		b = append(b, '.')
		l := len(b)
		b = append(b, "000000"[:k]...)
		for i := len(b) - 1; i >= l; i-- {
			b[i] = byte('0' + frac%10)
			frac /= 10
		}
		return b, true
	}
	return b, false
}

// appendInt32 appends v in decimal, as strconv.AppendInt does: the token
// id lists' numbers, written in place two digits at a time.
func appendInt32(b []byte, v int32) []byte {
	u := uint32(v)
	if v < 0 {
		b = append(b, '-')
		u = -u
	}
	if u < 10 {
		return append(b, byte('0'+u))
	}
	// digits: log10 from the bit length, less one below that power of 10
	t := bits.Len32(u) * 1233 >> 12
	n := t + 1
	if u < pow10u32[t] {
		n--
	}
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	d := b[l : l+n]
	j := n
	for u >= 100 {
		q := u / 100
		r := (u - q*100) * 2
		j -= 2
		d[j], d[j+1] = digitPairs[r], digitPairs[r+1]
		u = q
	}
	if u >= 10 {
		d[0], d[1] = digitPairs[u*2], digitPairs[u*2+1]
	} else {
		d[0] = byte('0' + u)
	}
	return b
}

var pow10u32 = [...]uint32{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"
