package runtime

import (
	"encoding/json"
	"testing"
)

func TestActionCanonicalJSON(t *testing.T) {
	cases := []struct {
		a    Action
		want string
	}{
		{Action{Kind: ActExec, Cmd: "ls -la", TimeoutMS: 5000}, `{"kind":"exec","cmd":"ls -la","timeout_ms":5000}`},
		{Action{Kind: ActExec, Cmd: "ls"}, `{"kind":"exec","cmd":"ls"}`},
		{Action{Kind: ActClick, X: 0, Y: 0}, `{"kind":"click","x":0,"y":0}`},
		{Action{Kind: ActWriteFile, Path: "a", Content: "b"}, `{"kind":"write_file","path":"a","content":"b"}`},
		{Action{Kind: ActScreenshot}, `{"kind":"screenshot"}`},
		{Action{Kind: ActDone}, `{"kind":"done"}`},
		{Action{}, `null`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.a)
		if err != nil {
			t.Fatalf("%v: %v", c.a.Kind, err)
		}
		if string(b) != c.want {
			t.Errorf("marshal %v = %s, want %s", c.a.Kind, b, c.want)
		}
		var back Action
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if back != c.a {
			t.Errorf("round trip of %s = %+v", b, back)
		}
	}
}

func TestActionRejectsNonCanonical(t *testing.T) {
	for _, in := range []string{
		`{"cmd":"ls"}`,
		`{"kind":"exce","cmd":"ls"}`,
		`{"kind":"exec"}`,
		`{"kind":"exec","cmd":"  "}`,
		`{"kind":"exec","cmd":"ls","path":"x"}`,
		`{"kind":"click","x":"1","y":2}`,
		`{"kind":"click","x":1,"y":2,"button":"thumb"}`,
		`[1]`,
	} {
		var a Action
		if err := json.Unmarshal([]byte(in), &a); err == nil {
			t.Errorf("%s accepted as %+v", in, a)
		}
	}
}

func TestEveryKindHasFieldsAndRoundTrips(t *testing.T) {
	for _, k := range ActionKinds() {
		names, req, ok := ActionFieldNames(k)
		if !ok || len(names) != len(req) {
			t.Fatalf("%s: fields %v %v", k, names, req)
		}
	}
}

func TestExitReasonsAndLosses(t *testing.T) {
	if ParseExitReason("bogus") != ExitUnknown || !ExitUnknown.ScaffoldLoss() || ExitUnknown.Completed() {
		t.Fatal("unknown must parse to ExitUnknown and count as a loss, never a completion")
	}
	for _, r := range ExitReasons() {
		if ParseExitReason(string(r)) != r {
			t.Errorf("%s does not round trip", r)
		}
	}
	if !ExitDone.Completed() || ExitDone.ScaffoldLoss() || !ExitPolicyError.ScaffoldLoss() || ExitMaxSteps.ScaffoldLoss() {
		t.Fatal("classification wrong")
	}
}

// TestMarshalEveryKindLikeEncodingJSON checks the canonical form of every
// kind against encoding/json writing the same members: kind first, then
// the kind's fields in order, an optional field at its zero value left
// out, each key and value quoted as json.Marshal quotes it.
func TestMarshalEveryKindLikeEncodingJSON(t *testing.T) {
	strs := []string{"ls -la", "a<b>&c", "é\u2028", "bad \xff utf-8", `q"\`, ""}
	for i, k := range ActionKinds() {
		names, required, _ := ActionFieldNames(k)
		for j, s := range strs {
			a := Action{Kind: k}
			// Each field set to a string or an integer (zero for every
			// other action, so that optional zero fields are left out).
			for f, name := range names {
				v := s
				n := int64(i*100 + j*10 + f)
				if j%2 == 1 {
					n = 0
				}
				switch p := a.fieldPointer(name).(type) {
				case *string:
					*p = v
				case *int:
					*p = int(n)
				case *int64:
					*p = n
				default:
					t.Fatalf("%s.%s: a field of type %T", k, name, p)
				}
			}
			want := `{"kind":` + marshal(t, string(k))
			for f, name := range names {
				str, n, isString := a.scalar(name)
				if !required[f] && str == "" && n == 0 {
					continue
				}
				var v any = n
				if isString {
					v = str
				}
				want += "," + marshal(t, name) + ":" + marshal(t, v)
			}
			want += "}"
			// MarshalJSON itself: json.Marshal would escape its output's
			// HTML characters again and hide a quoting that did not.
			got, err := a.MarshalJSON()
			if err != nil {
				t.Fatalf("%+v: %v", a, err)
			}
			if string(got) != want {
				t.Errorf("%+v:\n got %s\nwant %s", a, got, want)
			}
		}
	}
}

func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
