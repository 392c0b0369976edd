package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/internal/oracle/vllmsim"
	"github.com/forkline/forkline/internal/testenv"
)

// forkline view, end to end: datasets written by the real collect (a
// script run whose episodes end done, max_steps and without a reward; a
// branching run; a token-in-token-out run against the template-exact model
// server; a web run with screenshots and accessibility trees), a replay
// report, and the real binary serving them. The episode list's filters
// are checked against DuckDB running the same query over the same Parquet
// shards; the pages are loaded in headless Chromium, which must log no
// console error (a CSP violation, a failed request, an exception), and
// screenshots of the main views are compared with goldens
// (testdata/view/*.png; -update rewrites them and docs/view.png).

// viewKind is one dataset the view tests serve.
type viewKind struct {
	name  string
	build func(t *testing.T, c *corpus) string
}

func viewKinds() []viewKind {
	return []viewKind{
		{"script", func(t *testing.T, c *corpus) string {
			tasks := filepath.Join(c.root, "script-tasks")
			files := map[string]string{"too-long.yaml": corpusLongTask, "unverified.yaml": corpusUnverifiedTask}
			for _, f := range []string{"fix-sum.yaml", "config-migrate.yaml", "error-report.yaml"} {
				b, err := os.ReadFile(filepath.Join("../../examples/tasks", f))
				require.NoError(t, err)
				files[f] = string(b)
			}
			writeTasks(t, tasks, files)
			return collectKind(t, c, "script", zero, "-tasks", tasks, "-repeats", "3", "-replicas", "2")
		}},
		{"branching", func(t *testing.T, c *corpus) string {
			return collectKind(t, c, "branching", zero, "-tasks", "../../examples/tasks", "-repeats", "1", "-replicas", "2", "-branch", "at=2,width=2")
		}},
		{"tito", func(t *testing.T, c *corpus) string {
			tasks := writeTasks(t, filepath.Join(c.root, "tito-tasks"), map[string]string{"count.yaml": viewCountTask})
			return collectKind(t, c, "tito", zero, "-tasks", tasks, "-repeats", "2", "-replicas", "2",
				"-policy", "openai", "-base-url", viewModel(t, c).URL+"/v1", "-model", viewModel(t, c).Config().Model, "-policy-opt", "tokens=tito")
		}},
		{"chat", func(t *testing.T, c *corpus) string {
			// Chat mode, where a reply whose tokens are not the ones its
			// text renders to is drift: the record is cut there.
			tasks := writeTasks(t, filepath.Join(c.root, "chat-tasks"), map[string]string{"drift.yaml": viewDriftTask})
			return collectKind(t, c, "chat", zero, "-tasks", tasks, "-repeats", "2", "-replicas", "2",
				"-policy", "openai", "-base-url", viewModel(t, c).URL+"/v1", "-model", viewModel(t, c).Config().Model, "-policy-opt", "tokens=chat")
		}},
		{"web", func(t *testing.T, c *corpus) string {
			testenv.NeedChromium(t)
			return collectKind(t, c, "web", zero, "-tasks", "../../examples/tasks/web", "-repeats", "1", "-replicas", "2")
		}},
	}
}

// The model kinds' tasks, and the model server's script for them: every
// output is the same from one run to the next (cat, not ls -l, whose
// dates would change the observation tokens the token record's golden
// shows). On the drift task the second reply is generated with a
// non-canonical token split: chat mode flags it as drift.
const (
	viewCountTask = `id: count
instruction: View task count. Write the number of files in this directory to out.txt, then call done.
files:
  a.txt: "a\n"
  b.txt: "b\n"
verify:
  cmd: test "$(cat out.txt)" = 2
  reward: exit
limits: {max_steps: 6}
`
	viewDriftTask = `id: drift
instruction: View task drift. Write the number of files in this directory to out.txt, then call done.
files:
  a.txt: "a\n"
verify:
  cmd: test "$(cat out.txt)" = 1
  reward: exit
limits: {max_steps: 6}
`
)

// viewModel is the template-exact model server (Qwen3's real template and
// tokenizer) scripted for the view's model kinds.
func viewModel(t *testing.T, c *corpus) *vllmsim.Server {
	t.Helper()
	if c.model != nil {
		return c.model
	}
	requireOracle(t)
	respond := func(turn vllmsim.Turn) (vllmsim.Reply, error) {
		i := strings.Count(turn.Prompt, "<|im_start|>assistant") - 1
		drift := strings.Contains(turn.Prompt, "View task drift")
		if !drift && !strings.Contains(turn.Prompt, "View task count") {
			return vllmsim.Reply{}, fmt.Errorf("view: no scripted reply for %.80q", turn.Prompt)
		}
		switch i {
		case 0:
			return vllmsim.Reply{Text: call("exec", `{"cmd": "ls | wc -l"}`)}, nil
		case 1:
			if drift {
				return vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "1\n"}`), NonCanonical: true}, nil
			}
			return vllmsim.Reply{Text: call("write_file", `{"path": "out.txt", "content": "2\n"}`)}, nil
		case 2:
			return vllmsim.Reply{Text: call("done", `{"answer": "done"}`)}, nil
		}
		return vllmsim.Reply{}, fmt.Errorf("view: no scripted turn %d", i)
	}
	c.model = vllmsim.Start(c.parent, vllmsim.Config{ToolParser: true, Respond: respond})
	return c.model
}

// viewServer is a running forkline view.
type viewServer struct {
	url  string
	dirs []string       // in the order served: run i is dirs[i]
	runs map[string]int // kind → run index
}

// startView runs forkline view over dirs as a process on a free loopback
// port and returns its address; the process is stopped with SIGTERM when
// the test ends, and must exit 0.
func startView(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(forklineBin, append([]string{"view"}, append(args, "-addr", "127.0.0.1:0")...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stderr)
	addr := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/`)
	var printed []string
	for lines.Scan() {
		printed = append(printed, lines.Text())
		if m := addr.FindStringSubmatch(lines.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			t.Cleanup(func() {
				cmd.Process.Signal(os.Interrupt)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err := <-done:
					assert.NoError(t, err, "forkline view exits 0 on SIGINT")
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
					t.Errorf("forkline view did not stop within 30s of SIGINT")
				}
			})
			return m[1]
		}
	}
	cmd.Wait()
	t.Fatalf("forkline view printed no address:\n%s", strings.Join(printed, "\n"))
	return ""
}

func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if v != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, v), "%s: %s", u, body)
	}
	return resp.StatusCode
}

func TestView(t *testing.T) {
	c := &corpus{root: t.TempDir(), parent: t, dirs: map[string]string{}}
	srv := &viewServer{runs: map[string]int{}}
	for _, k := range viewKinds() {
		t.Run("collect-"+k.name, func(t *testing.T) {
			dir := k.build(t, c)
			srv.runs[k.name] = len(srv.dirs)
			srv.dirs = append(srv.dirs, dir)
		})
	}
	if _, ok := srv.runs["script"]; !ok {
		t.Fatal("the script dataset was not built")
	}
	report := filepath.Join(c.root, "replay.json")
	code, stdout, stderr := runBin(t, 5*time.Minute, "replay", "-in", srv.dirs[srv.runs["script"]], "-report", report, "-workdir", t.TempDir(), "-quiet")
	require.Equal(t, cli.ExitOK, code, "replay: %s%s", stdout, stderr)
	srv.url = startView(t, append(append([]string(nil), srv.dirs...), "-report", report)...)

	t.Run("filters match DuckDB", func(t *testing.T) { testViewFilters(t, srv) })
	t.Run("view, inspect -list and export select alike", func(t *testing.T) { testViewSelectsAsExport(t, srv) })
	t.Run("server refuses", func(t *testing.T) { testViewRefusals(t, srv) })
	t.Run("pages", func(t *testing.T) { testViewPages(t, srv) })
}

// listIDs asks the server for the whole list (limit 1000, one page) under
// params and returns the ids in its order, with the matched count.
func listIDs(t *testing.T, srv *viewServer, run int, params url.Values) ([]string, int) {
	t.Helper()
	var page struct {
		Matched  int `json:"matched"`
		Episodes []struct {
			ID string `json:"episode_id"`
		} `json:"episodes"`
	}
	p := url.Values{}
	for k, v := range params {
		p[k] = v
	}
	if p.Get("limit") == "" {
		p.Set("limit", "1000")
	}
	u := fmt.Sprintf("%s/api/runs/%d/episodes?%s", srv.url, run, p.Encode())
	require.Equal(t, http.StatusOK, getJSON(t, u, &page), u)
	ids := []string{}
	for _, e := range page.Episodes {
		ids = append(ids, e.ID)
	}
	return ids, page.Matched
}

// duckIDs runs the episode list's query in DuckDB over the dataset's
// shards: where is a condition on e (the episodes table), r.reward (the
// episode-level verify reward) and t (the episodes some step of which
// holds the text); order is an ORDER BY list before the episode_id tie.
func duckIDs(t *testing.T, duck, dir, where, order string, text string, offset, limit int) ([]string, int) {
	t.Helper()
	glob := func(table string) string { return "'" + filepath.Join(dir, table, "part-*.parquet") + "'" }
	lit := "'" + strings.ReplaceAll(strings.ToLower(text), "'", "''") + "'"
	with := fmt.Sprintf(`WITH e AS (SELECT * FROM read_parquet(%s)),
r AS (SELECT episode_id, first(value) AS reward FROM read_parquet(%s) WHERE name = 'verify' AND step_index IS NULL AND value IS NOT NULL GROUP BY episode_id),
t AS (SELECT DISTINCT episode_id FROM read_parquet(%s) WHERE contains(lower(action_json), %s) OR contains(lower(output), %s) OR contains(lower(coalesce(model_text, '')), %s)),
m AS (SELECT e.*, r.reward FROM e LEFT JOIN r USING (episode_id) WHERE %s)`, glob("episodes"), glob("rewards"), glob("steps"), lit, lit, lit, where)
	if order != "" {
		order += ", "
	}
	q := with + fmt.Sprintf(" SELECT episode_id, (SELECT count(*) FROM m) AS matched FROM m ORDER BY %sepisode_id LIMIT %d OFFSET %d", order, limit, offset)
	out, err := exec.Command(duck, "-sql", q).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("duckdb: %v: %s\n%s", err, ee.Stderr, q)
	}
	require.NoError(t, err)
	var rows []struct {
		ID      string `json:"episode_id"`
		Matched int    `json:"matched"`
	}
	require.NoError(t, json.Unmarshal(out, &rows))
	ids := []string{}
	matched := 0
	for _, r := range rows {
		ids = append(ids, r.ID)
		matched = r.Matched
	}
	if len(rows) == 0 {
		var n []struct {
			N int `json:"n"`
		}
		cnt, err := exec.Command(duck, "-sql", with+" SELECT count(*) AS n FROM m").Output()
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(cnt, &n))
		matched = n[0].N
	}
	return ids, matched
}

// viewQuery is one episode-list query and the same in SQL.
type viewQuery struct {
	kind   string
	params string // the API's parameters
	where  string // SQL over e, reward and t
	order  string
	text   string
	offset int
	limit  int
	// nonEmpty: the dataset must give this query rows (so that the case
	// tests something).
	nonEmpty bool
}

func viewQueries() []viewQuery {
	return []viewQuery{
		{kind: "script", where: "true", nonEmpty: true},
		{kind: "script", params: "task=fix-sum", where: "task_id = 'fix-sum'", nonEmpty: true},
		{kind: "script", params: "task=fix-sum,unverified&sort=task_id&desc=true", where: "task_id IN ('fix-sum', 'unverified')", order: "task_id DESC", nonEmpty: true},
		{kind: "script", params: "exit=max_steps", where: "exit_reason = 'max_steps'", nonEmpty: true},
		{kind: "script", params: "exit=done&min_reward=1", where: "exit_reason = 'done' AND reward >= 1", nonEmpty: true},
		{kind: "script", params: "min_reward=0.2&max_reward=0.8", where: "reward BETWEEN 0.2 AND 0.8", nonEmpty: true},
		{kind: "script", params: "max_reward=0", where: "reward <= 0"},
		{kind: "script", params: "sort=reward&desc=true", where: "true", order: "reward DESC NULLS LAST", nonEmpty: true},
		{kind: "script", params: "sort=reward", where: "true", order: "reward ASC NULLS LAST", nonEmpty: true},
		{kind: "script", params: "sort=steps&desc=true&offset=2&limit=4", where: "true", order: "steps DESC", offset: 2, limit: 4, nonEmpty: true},
		{kind: "script", params: "sort=duration_ms", where: "true", order: "duration_ms", nonEmpty: true},
		{kind: "script", params: "text=MIGRATE", where: "episode_id IN (SELECT episode_id FROM t)", text: "MIGRATE", nonEmpty: true},
		{kind: "script", params: "text=echo 2&exit=max_steps", where: "episode_id IN (SELECT episode_id FROM t) AND exit_reason = 'max_steps'", text: "echo 2", nonEmpty: true},
		{kind: "script", params: "text=no such text anywhere", where: "episode_id IN (SELECT episode_id FROM t)", text: "no such text anywhere"},
		{kind: "branching", params: "branch=true", where: "parent_episode_id IS NOT NULL", nonEmpty: true},
		{kind: "branching", params: "branch=false&sort=exit_reason", where: "parent_episode_id IS NULL", order: "exit_reason", nonEmpty: true},
		{kind: "branching", params: "exit=branched", where: "exit_reason = 'branched'", nonEmpty: true},
		{kind: "branching", params: "branch=true&min_reward=1&sort=reset_ms&desc=true", where: "parent_episode_id IS NOT NULL AND reward >= 1", order: "reset_ms DESC", nonEmpty: true},
		{kind: "tito", params: "drift=false", where: "NOT token_drift", nonEmpty: true},
		{kind: "tito", params: "drift=true", where: "token_drift"},
		{kind: "tito", params: "text=wc -l&sort=reward&desc=true", where: "episode_id IN (SELECT episode_id FROM t)", order: "reward DESC NULLS LAST", text: "wc -l", nonEmpty: true},
		{kind: "chat", params: "drift=true", where: "token_drift", nonEmpty: true},
		{kind: "chat", params: "drift=false", where: "NOT token_drift"},
		{kind: "web", params: "exit=done&sort=repeat", where: "exit_reason = 'done'", order: "repeat", nonEmpty: true},
	}
}

func testViewFilters(t *testing.T, srv *viewServer) {
	duck := testenv.NeedDuckDB(t)
	for _, q := range viewQueries() {
		run, ok := srv.runs[q.kind]
		if !ok {
			continue // its dataset's component is missing: its build skipped (or failed under FORKLINE_REQUIRE)
		}
		t.Run(q.kind+"?"+q.params, func(t *testing.T) {
			params, err := url.ParseQuery(q.params)
			require.NoError(t, err)
			limit := q.limit
			if limit == 0 {
				limit = 1000
			}
			got, gotN := listIDs(t, srv, run, params)
			want, wantN := duckIDs(t, duck, srv.dirs[run], q.where, q.order, q.text, q.offset, limit)
			assert.Equal(t, wantN, gotN, "matched")
			assert.Equal(t, want, got, "the page's episodes, in order")
			if q.nonEmpty {
				assert.NotEmpty(t, got, "the dataset gives this query rows")
			}
		})
	}
}

// testViewSelectsAsExport: the same filters give the same episodes in
// forkline view's list, inspect -list and export -where (all three apply
// export.Filter), on the datasets collect wrote. Export writes
// trajectories, so an episode that branched is not among its lines: the
// datasets here hold none.
func testViewSelectsAsExport(t *testing.T, srv *viewServer) {
	type flag struct{ name, value string }
	for _, kind := range []string{"script", "tito"} {
		run, ok := srv.runs[kind]
		if !ok {
			continue
		}
		dir := srv.dirs[run]
		for _, filters := range [][]flag{
			nil,
			{{"task", "fix-sum"}},
			{{"task", "fix-sum,unverified"}, {"where", "exit_reason!=done"}},
			{{"where", "exit_reason=done"}, {"min-reward", "1"}},
			{{"where", "token_drift=false"}, {"where", "branched=false"}, {"min-reward", "0.2"}},
			{{"min-reward", "0.1"}, {"max-reward", "0.9"}},
			{{"max-reward", "0"}, {"task", "unverified,fix-sum,too-long"}},
			{{"where", "reset_strategy=fork,recreate"}, {"where", "provider!=nowhere"}},
		} {
			var args []string
			params := url.Values{}
			for _, f := range filters {
				args = append(args, "-"+f.name, f.value)
				params.Add(strings.ReplaceAll(f.name, "-", "_"), f.value)
			}
			t.Run(kind+"?"+params.Encode(), func(t *testing.T) {
				viewed, matched := listIDs(t, srv, run, params)
				require.Len(t, viewed, matched, "one page holds the whole list")
				slices.Sort(viewed)

				code, stdout, stderr := runBin(t, 2*time.Minute, append([]string{"inspect", dir, "-list", "-limit", "0", "-json"}, args...)...)
				require.Equal(t, cli.ExitOK, code, "inspect -list: %s%s", stdout, stderr)
				var list struct {
					Episodes []struct {
						ID string `json:"episode_id"`
					} `json:"episodes"`
				}
				require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
				listed := []string{}
				for _, e := range list.Episodes {
					listed = append(listed, e.ID)
				}
				slices.Sort(listed)

				out := filepath.Join(t.TempDir(), "out.jsonl")
				code, stdout, stderr = runBin(t, 2*time.Minute, append([]string{"export", "-in", dir, "-to", "jsonl", "-out", out, "-quiet"}, args...)...)
				exported := []string{}
				if len(viewed) > 0 || code == cli.ExitOK {
					require.Equal(t, cli.ExitOK, code, "export: %s%s", stdout, stderr)
					sc := bufio.NewScanner(openFile(t, out))
					sc.Buffer(nil, 256<<20)
					for sc.Scan() {
						var line struct {
							ID string `json:"episode_id"`
						}
						require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
						exported = append(exported, line.ID)
					}
					require.NoError(t, sc.Err())
				}
				slices.Sort(exported)

				assert.Equal(t, listed, viewed, "view and inspect -list")
				assert.Equal(t, exported, viewed, "view and export")
			})
		}
	}
}

func testViewRefusals(t *testing.T, srv *viewServer) {
	// Read-only: other methods are refused.
	resp, err := http.Post(srv.url+"/api/runs", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	// A Host that is not loopback (a DNS-rebinding page) is refused.
	req, _ := http.NewRequest("GET", srv.url+"/api/runs", nil)
	req.Host = "attacker.example:80"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	// A bad query names the parameter.
	var body map[string]string
	resp, err = http.Get(srv.url + "/api/runs/0/episodes?sort=colour")
	require.NoError(t, err)
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body["error"], `sort="colour"`)
	assert.Contains(t, body["error"], "reward")
	// A non-loopback address is refused before anything is read, unless
	// -remote.
	r := execute(t.Context(), "view", srv.dirs[0], "-addr", "0.0.0.0:0")
	assert.Equal(t, cli.ExitBadInput, r.code)
	assert.Contains(t, r.stderr, "not loopback")
	r = execute(t.Context(), "view", t.TempDir())
	assert.Equal(t, cli.ExitBadInput, r.code, "not a dataset")
}

// browser starts headless Chromium with a fixed viewport and returns a
// tab context, and the console errors and warnings its pages log so far
// (exceptions, CSP violations and failed loads included).
func browser(t *testing.T) (context.Context, func() []string) {
	exe := testenv.NeedChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1200, 900),
		chromedp.Flag("force-device-scale-factor", "1"), chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("font-render-hinting", "none"), chromedp.Flag("disable-lcd-text", true),
		chromedp.Flag("force-color-profile", "srgb"), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelA() })
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1200, 900)))
	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String()+" ("+m.URL+")")
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// open navigates to the page at hash and waits until the app says it is
// drawn (body[data-ready] is the route).
func open(ctx context.Context, base, hash string) error {
	return chromedp.Do(ctx, chromedp.Navigate(base+"/"+hash), waitReady(hash))
}

func waitReady(hash string) chromedp.Action[chromedp.Void] {
	want := strings.TrimPrefix(hash, "#")
	if want == "" {
		want = "/"
	}
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.body.dataset.ready === %q`, want), chromedp.WithPollingTimeout(2*time.Minute))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, "%s", expr)
	return v
}

// hideVolatile hides what changes from one collection to the next (times,
// run ids, dates, temporary paths) so that screenshots compare; through the
// CSSOM, as the page's CSP refuses a style element.
const hideVolatile = `(() => { for (const e of document.querySelectorAll(".volatile")) e.style.setProperty("visibility", "hidden"); return true; })()`

func testViewPages(t *testing.T, srv *viewServer) {
	ctx, consoleErrors := browser(t)
	script := srv.runs["script"]
	rowIDs := `[...document.querySelectorAll("#episodes tr[data-episode]")].map(r => r.dataset.episode)`

	// The first page lists the runs and compares two.
	require.NoError(t, open(ctx, srv.url, "#/"))
	assert.Equal(t, len(srv.dirs), eval[int](t, ctx, `document.querySelectorAll("main table tr").length - 1`))
	require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/compare/%d/%d", script, srv.runs["branching"])))
	assert.Equal(t, 5, eval[int](t, ctx, `document.querySelectorAll("#compare-tasks tr").length - 1`),
		"the tasks of both runs: the script run's five, three of them the examples'")

	// The run page: its histogram and tasks.
	require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d", script)))
	assert.GreaterOrEqual(t, eval[int](t, ctx, `document.querySelectorAll("#histogram .bar").length`), 2, "a bar per reward value")
	assert.Equal(t, 5, eval[int](t, ctx, `document.querySelectorAll("#tasks tr").length - 1`))
	golden(t, ctx, "run")

	// The episode list, filtered through the form as a user does, shows
	// what the API and DuckDB select.
	require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episodes", script)))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`select[name=task]`), "fix-sum"),
		chromedp.SetValue(chromedp.CSS(`input[name=min_reward]`), "0.5"),
		chromedp.SetValue(chromedp.CSS(`select[name=sort]`), "duration_ms"),
		chromedp.SetValue(chromedp.CSS(`select[name=desc]`), "true"),
		chromedp.Click(chromedp.CSS(`#apply`)),
		waitReady(fmt.Sprintf("#/run/%d/episodes?task=fix-sum&min_reward=0.5&sort=duration_ms&desc=true&limit=50", script))))
	shown := eval[[]string](t, ctx, rowIDs)
	want, _ := listIDs(t, srv, script, url.Values{"task": {"fix-sum"}, "min_reward": {"0.5"}, "sort": {"duration_ms"}, "desc": {"true"}})
	assert.Equal(t, want, shown, "the page lists what the API returns")
	require.NotEmpty(t, shown)
	if duck, err := testenv.BuildDuckDB(); err == nil {
		sql, _ := duckIDs(t, duck, srv.dirs[script], "task_id = 'fix-sum' AND reward >= 0.5", "duration_ms DESC", "", 0, 1000)
		assert.Equal(t, sql, shown, "the page lists what DuckDB selects")
	}
	require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episodes?sort=task_id", script)))
	golden(t, ctx, "episodes")

	// An episode: its transcript, rewards with the verifier's output, and
	// its replay report's verdict.
	require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episode/%s", script, shown[0])))
	assert.Positive(t, eval[int](t, ctx, `document.querySelectorAll("#transcript .step").length`))
	assert.Contains(t, eval[string](t, ctx, `[...document.querySelectorAll("main p")].map(p => p.textContent).find(s => s.startsWith("replay:")) || ""`),
		"identical", "the replay report's verdict is linked")
	golden(t, ctx, "episode")

	if run, ok := srv.runs["branching"]; ok {
		require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episodes?branch=true", run)))
		branch := eval[[]string](t, ctx, rowIDs)
		require.NotEmpty(t, branch)
		require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episode/%s", run, branch[0])))
		assert.Equal(t, 3, eval[int](t, ctx, `document.querySelectorAll("#branch-tree li").length`), "the root and its two branches")
		root := eval[string](t, ctx, `document.querySelector("#branch-tree > li > a").getAttribute("href")`)
		// One click to another member of the tree.
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#branch-tree > li > a`)), waitReady(root)))
		title := eval[string](t, ctx, `document.querySelector("h1").textContent`)
		assert.True(t, strings.HasSuffix(root, strings.TrimPrefix(title, "Episode ")), "the root's page (%s, %s)", root, title)
		golden(t, ctx, "branch")
	}

	if run, ok := srv.runs["tito"]; ok {
		ids, _ := listIDs(t, srv, run, url.Values{"task": {"count"}})
		require.NotEmpty(t, ids)
		require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episode/%s", run, ids[0])))
		assert.Positive(t, eval[int](t, ctx, `document.querySelectorAll("#response-tokens .tok").length`), "the response ids are drawn")
		assert.Positive(t, eval[int](t, ctx, `[...document.querySelectorAll("#response-tokens .tok:not(.obs)")].filter(e => e.style.background).length`),
			"the model's tokens are coloured by logprob")
		assert.Positive(t, eval[int](t, ctx, `document.querySelectorAll("#response-tokens .tok.obs").length`), "observation tokens are shaded (mask 0)")
		assert.Equal(t, 3, eval[int](t, ctx, `document.querySelectorAll("#response-tokens .turn-end").length`), "three model turns end in the record")
		eval[bool](t, ctx, `(document.querySelector("#token-record").scrollIntoView({block: "start"}), true)`)
		golden(t, ctx, "tokens")
	}

	if run, ok := srv.runs["chat"]; ok {
		ids, _ := listIDs(t, srv, run, url.Values{"drift": {"true"}})
		require.NotEmpty(t, ids)
		require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episode/%s", run, ids[0])))
		assert.Contains(t, eval[string](t, ctx, `(document.querySelector("#drift-cut") || {}).textContent || ""`), "cut here",
			"the drift cut point is marked")
	}

	if run, ok := srv.runs["web"]; ok {
		ids, _ := listIDs(t, srv, run, nil)
		require.NotEmpty(t, ids)
		require.NoError(t, open(ctx, srv.url, fmt.Sprintf("#/run/%d/episode/%s", run, ids[0])))
		require.NoError(t, chromedp.Do(ctx, chromedp.Poll[chromedp.Void](`[...document.images].every(i => i.complete)`, chromedp.WithPollingTimeout(time.Minute))))
		assert.Positive(t, eval[int](t, ctx, `[...document.querySelectorAll("img.shot")].filter(i => i.naturalWidth > 0).length`), "the screenshots load")
		assert.Positive(t, eval[int](t, ctx, `document.querySelectorAll("details.a11y").length`), "accessibility trees to unfold")
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`details.a11y > summary`))))
		assert.Positive(t, eval[int](t, ctx, `document.querySelector("details.a11y[open]").querySelectorAll("li").length`), "an unfolded tree shows its nodes")
		eval[bool](t, ctx, `(document.querySelector("details.a11y[open]").scrollIntoView({block: "start"}), true)`)
		golden(t, ctx, "web")
	}
	time.Sleep(200 * time.Millisecond) // the last page's console events
	assert.Empty(t, consoleErrors(), "the pages log no console error")
}

// goldenTolerance is the share of pixels that may differ (by more than
// goldenChannel in a colour channel) between a page and its golden: text
// antialiasing may move a few pixels; a changed layout moves thousands.
const (
	goldenTolerance = 0.01
	goldenChannel   = 48
)

// golden compares a screenshot of the viewport (1200×900, what changes
// between collections hidden) with testdata/view/NAME.png; -update
// rewrites it (and docs/view.png from the run page).
func golden(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	eval[bool](t, ctx, hideVolatile)
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	path := filepath.Join("testdata", "view", name+".png")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, shot, 0o644))
		if name == "episodes" {
			require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "view.png"), shot, 0o644))
		}
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden: run go test ./cmd/forkline -run TestView -update")
	diff, err := pixelDiff(want, shot)
	require.NoError(t, err)
	t.Logf("%s: %.3f%% of the pixels differ from the golden", name, 100*diff)
	if diff > goldenTolerance {
		// Kept after the test, to compare with the golden.
		f, err := os.CreateTemp("", "forkline-view-"+name+"-*.png")
		require.NoError(t, err)
		f.Write(shot)
		f.Close()
		out := f.Name()
		t.Errorf("%s: %.2f%% of the pixels differ from %s (tolerance %.2f%%); this run's screenshot: %s", name, 100*diff, path, 100*goldenTolerance, out)
	}
}

// pixelDiff is the share of pixels of two PNGs that differ by more than
// goldenChannel in a channel; images of different sizes differ entirely.
func pixelDiff(a, b []byte) (float64, error) {
	ia, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		return 0, err
	}
	ib, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	if ia.Bounds() != ib.Bounds() {
		return 1, nil
	}
	r := ia.Bounds()
	differ := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if channelsDiffer(ia, ib, x, y) {
				differ++
			}
		}
	}
	return float64(differ) / float64(r.Dx()*r.Dy()), nil
}

func channelsDiffer(a, b image.Image, x, y int) bool {
	r1, g1, b1, _ := a.At(x, y).RGBA()
	r2, g2, b2, _ := b.At(x, y).RGBA()
	d := func(p, q uint32) bool {
		p, q = p>>8, q>>8
		if p > q {
			return p-q > goldenChannel
		}
		return q-p > goldenChannel
	}
	return d(r1, r2) || d(g1, g2) || d(b1, b2)
}
