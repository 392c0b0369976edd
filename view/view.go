// Package view is forkline view: a local, read-only web application over
// one or more datasets — a run's summary (status, plan, provider, policy,
// capture, rewards by task, exit reasons, the reward histogram, reset
// latency, token drift), its episode list (filtered, sorted, paged, read
// from an index of the episodes' summary columns), an episode as the model saw it (transcript, screenshots,
// accessibility trees, rewards with their verifier output, timings, the
// token record, the branching tree), runs side by side, and links to the
// run's replay reports. Its pages are plain HTML, CSS and JavaScript
// embedded in the binary; they fetch nothing but this server's own JSON API.
//
// It reads datasets through formats/shard and inspect (the summary and the
// transcript are inspect's, so the page shows what inspect prints), and
// selects episodes with export.Filter (the selection export and inspect
// -list apply, so the three agree), and
// writes nothing anywhere. It must not know how a dataset was collected or
// any trainer format. It listens where its caller says; the command keeps
// that to loopback unless told otherwise (CheckAddr), and the server
// answers only requests whose Host names loopback unless Config.AnyHost,
// so a web page elsewhere cannot read a dataset through the user's
// browser (DNS rebinding).
package view

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/inspect"
)

//go:embed assets
var assets embed.FS

// Config configures a Server.
type Config struct {
	// Dirs are the datasets, in the order the pages list them.
	Dirs []string
	// Reports are replay reports (forkline replay -report FILE: .json or
	// .html). A JSON report is linked from the run whose directory it
	// names, and from each episode it lists; an HTML report from every run.
	Reports []string
	// Reward is the episode-level reward the pages report and the list
	// filters and sorts by; inspect.DefaultReward when empty.
	Reward string
	// AnyHost accepts requests whatever their Host header says (for a
	// server reached by a name other than loopback's).
	AnyHost bool
}

// Sentinel errors of New.
var (
	// ErrBadReport: a -report file that cannot be read, or is not a replay
	// report.
	ErrBadReport = errors.New("view: not a replay report")
)

// Server is the web application. It is an http.Handler; its handlers are
// safe for concurrent use.
type Server struct {
	cfg     Config
	runs    []*run
	reports []*report
	mux     *http.ServeMux
}

type run struct {
	Index   int              `json:"index"`
	Dir     string           `json:"dir"`
	Summary *inspect.Summary `json:"summary"`
	// Damaged is what Summarize said when the dataset does not match its
	// manifest: the page shows the problems, and the episode list fails.
	Damaged string       `json:"damaged,omitempty"`
	Reports []reportLink `json:"replay_reports"`
	idx     *index       // the episode list's, filled on the first list asked
	// ready is closed when Summary and Damaged are set (summarise, in the
	// background from New): until then neither is read.
	ready chan struct{}

	mu sync.Mutex
	ds *shard.Dataset
}

// dataset is the run's dataset as its manifest lists it now: a run that was
// not complete when last read is read again (the manifest only), so the
// list of a collection still running grows with its closed generations.
func (r *run) dataset() *shard.Dataset {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.ds.Manifest()
	if m.Status == shard.StatusComplete {
		return r.ds
	}
	if ds, err := shard.Open(r.Dir); err == nil && len(ds.Manifest().Shards) != len(m.Shards) {
		r.ds = ds
	}
	return r.ds
}

type reportLink struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	Kind  string `json:"kind"` // json | html
}

// report is one replay report file.
type report struct {
	reportLink
	path    string
	dataset string                     // the dataset it replayed (JSON reports)
	byID    map[string]EpisodeInReport // its episodes (JSON reports)
}

// EpisodeInReport is what a replay report says of one episode.
type EpisodeInReport struct {
	Report int    `json:"report"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Steps  int    `json:"steps"`
	Match  int    `json:"steps_matched"`
}

// New opens each dataset (a directory that is not one fails with
// inspect.ErrNotDataset) and reads each report, and returns the server at
// once: each run's summary (inspect.Summarize, which verifies every shard
// once, here, not on each page) is read in the background, until ctx ends.
// Until a run's summary is read its page says it is summarising, and its
// episode list waits for it (a damaged dataset's list fails); a damaged one
// is served with its problems.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if len(cfg.Dirs) == 0 {
		return nil, fmt.Errorf("%w: no dataset given", inspect.ErrNotDataset)
	}
	if cfg.Reward == "" {
		cfg.Reward = inspect.DefaultReward
	}
	s := &Server{cfg: cfg}
	for i, dir := range cfg.Dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", dir)
			}
			return nil, fmt.Errorf("%w: %v", inspect.ErrNotDataset, err)
		}
		r := &run{Index: i, Dir: dir, Reports: []reportLink{}, idx: newIndex(), ready: make(chan struct{})}
		var err error
		if r.ds, err = shard.Open(dir); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", inspect.ErrNotDataset, dir, err)
		}
		s.runs = append(s.runs, r)
	}
	for _, r := range s.runs {
		go r.summarise(ctx, cfg.Reward)
	}
	for i, path := range cfg.Reports {
		rep, err := readReport(i, path)
		if err != nil {
			return nil, err
		}
		s.reports = append(s.reports, rep)
		for _, r := range s.runs {
			if rep.Kind == "html" || sameDir(rep.dataset, r.Dir) {
				r.Reports = append(r.Reports, rep.reportLink)
			}
		}
	}
	s.routes()
	return s, nil
}

// summarise reads the run's summary and closes ready. A summary that
// cannot be read at all is served as what the manifest says, damaged with
// the error.
func (r *run) summarise(ctx context.Context, reward string) {
	defer close(r.ready)
	sum, err := inspect.Summarize(ctx, r.Dir, inspect.Options{Reward: reward})
	if sum == nil {
		m := r.ds.Manifest()
		sum = &inspect.Summary{Dir: r.Dir, Status: m.Status, RunID: m.RunID, Tool: m.Tool, ToolVersion: m.ToolVersion,
			SchemaVersion: m.SchemaVersion, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, Problems: []string{}}
	}
	r.Summary = sum
	if err != nil {
		r.Damaged = err.Error()
	}
}

// summarised reports whether the run's summary is read.
func (r *run) summarised() bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// waitSummary waits for the run's summary, or for ctx.
func (r *run) waitSummary(ctx context.Context) error {
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sameDir(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	aa, _ := filepath.Abs(a)
	ab, _ := filepath.Abs(b)
	return aa == ab
}

// readReport reads a replay report: for JSON, the fields of forkline
// replay's Report the pages show (the dataset, and each episode's status).
func readReport(i int, path string) (*report, error) {
	rep := &report{reportLink: reportLink{Index: i, Name: filepath.Base(path)}, path: path}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadReport, err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".html":
		rep.Kind = "html"
		return rep, nil
	case ".json":
		rep.Kind = "json"
	default:
		return nil, fmt.Errorf("%w: %s: want a .json or .html report (forkline replay -report FILE)", ErrBadReport, path)
	}
	var body struct {
		Dataset  *string `json:"dataset"`
		Episodes []struct {
			EpisodeID string `json:"episode_id"`
			Status    string `json:"status"`
			Steps     int    `json:"steps"`
			Matched   int    `json:"steps_matched"`
		} `json:"episodes"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadReport, path, err)
	}
	if body.Dataset == nil {
		return nil, fmt.Errorf("%w: %s: no \"dataset\" field (forkline replay -report FILE.json writes one)", ErrBadReport, path)
	}
	rep.dataset = *body.Dataset
	rep.byID = map[string]EpisodeInReport{}
	for _, e := range body.Episodes {
		rep.byID[e.EpisodeID] = EpisodeInReport{Report: i, Name: rep.Name, Status: e.Status, Steps: e.Steps, Match: e.Matched}
	}
	return rep, nil
}

// CheckAddr refuses an address to listen on that is not loopback
// (127.0.0.0/8, ::1 or localhost) unless remote is set: a dataset holds
// what the agents saw, which may be private, and the server has no
// authentication. An empty host (":8080") listens everywhere and is
// refused the same way.
func CheckAddr(addr string, remote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("view: address %q: %v (want HOST:PORT)", addr, err)
	}
	if remote || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("view: address %q is not loopback: the viewer has no authentication, and anyone who reaches it reads the datasets; listen on 127.0.0.1, or say so explicitly to listen on %q", addr, host)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	m.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := assets.ReadFile("assets/index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b)
	})
	m.HandleFunc("GET /api/runs", s.handleRuns)
	m.HandleFunc("GET /api/runs/{run}", s.handleRun)
	m.HandleFunc("GET /api/runs/{run}/episodes", s.handleEpisodes)
	m.HandleFunc("GET /api/runs/{run}/episodes/{id}", s.handleEpisode)
	m.HandleFunc("GET /api/runs/{run}/episodes/{id}/screenshot", s.handleScreenshot)
	m.HandleFunc("GET /reports/{n}", s.handleReport)
	s.mux = m
}

// ServeHTTP answers GET and HEAD requests (the mux refuses other methods
// with 405), from loopback Host names unless Config.AnyHost.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.AnyHost {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !isLoopback(strings.Trim(host, "[]")) {
			http.Error(w, "view: this server answers requests for loopback names only (Host "+strconv.Quote(r.Host)+")", http.StatusForbidden)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	enc.Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) *run {
	i, err := strconv.Atoi(r.PathValue("run"))
	if err != nil || i < 0 || i >= len(s.runs) {
		fail(w, http.StatusNotFound, fmt.Errorf("view: no run %q (runs 0 to %d)", r.PathValue("run"), len(s.runs)-1))
		return nil
	}
	return s.runs[i]
}

// runItem is a run in the list of runs. Until its summary is read
// (Summarising) it has no episode count and is not known to be damaged.
type runItem struct {
	Index       int    `json:"index"`
	Dir         string `json:"dir"`
	RunID       string `json:"run_id"`
	Status      string `json:"status"`
	Episodes    *int64 `json:"episodes"`
	Damaged     bool   `json:"damaged"`
	Summarising bool   `json:"summarising,omitempty"`
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Reward string    `json:"reward"`
		Runs   []runItem `json:"runs"`
	}{Reward: s.cfg.Reward, Runs: []runItem{}}
	for _, r := range s.runs {
		if !r.summarised() {
			m := r.ds.Manifest()
			out.Runs = append(out.Runs, runItem{Index: r.Index, Dir: r.Dir, RunID: m.RunID, Status: string(m.Status), Summarising: true})
			continue
		}
		n := r.Summary.Episodes
		out.Runs = append(out.Runs, runItem{Index: r.Index, Dir: r.Dir, RunID: r.Summary.RunID, Status: string(r.Summary.Status),
			Episodes: &n, Damaged: r.Damaged != ""})
	}
	writeJSON(w, out)
}

// handleRun answers the run's summary, or, until it is read, that it is
// summarising (no summary: the page says so and asks again).
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	run := s.run(w, r)
	if run == nil {
		return
	}
	if !run.summarised() {
		writeJSON(w, struct {
			Index       int          `json:"index"`
			Dir         string       `json:"dir"`
			Summarising bool         `json:"summarising"`
			Reports     []reportLink `json:"replay_reports"`
		}{run.Index, run.Dir, true, run.Reports})
		return
	}
	writeJSON(w, run)
}

func (s *Server) handleEpisodes(w http.ResponseWriter, r *http.Request) {
	run := s.run(w, r)
	if run == nil {
		return
	}
	q, err := ParseQuery(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if err := run.waitSummary(r.Context()); err != nil {
		fail(w, http.StatusServiceUnavailable, err)
		return
	}
	if run.Damaged != "" {
		fail(w, http.StatusConflict, errors.New(run.Damaged))
		return
	}
	page, err := run.idx.page(r.Context(), run.dataset(), s.cfg.Reward, q)
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, page)
}

func (s *Server) handleEpisode(w http.ResponseWriter, r *http.Request) {
	run := s.run(w, r)
	if run == nil {
		return
	}
	id := r.PathValue("id")
	ds := run.dataset()
	gen, ok, err := run.idx.generation(r.Context(), ds, s.cfg.Reward, id)
	if err == nil && !ok {
		err = fmt.Errorf("%w: no episode %s in %s", inspect.ErrNoMatch, id, run.Dir)
	}
	var ep *Episode
	if err == nil {
		ep, err = readEpisode(r.Context(), ds, id, gen)
	}
	switch {
	case errors.Is(err, inspect.ErrNoMatch):
		fail(w, http.StatusNotFound, err)
		return
	case err != nil:
		fail(w, http.StatusInternalServerError, err)
		return
	}
	for _, rep := range s.reports {
		if e, ok := rep.byID[id]; ok && sameDir(rep.dataset, run.Dir) {
			ep.Reports = append(ep.Reports, e)
		}
	}
	writeJSON(w, ep)
}

func (s *Server) handleScreenshot(w http.ResponseWriter, r *http.Request) {
	run := s.run(w, r)
	if run == nil {
		return
	}
	step := -1
	if v := r.URL.Query().Get("step"); v != "start" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail(w, http.StatusBadRequest, fmt.Errorf("%w: step=%q: want a step index or start", ErrQuery, v))
			return
		}
		step = n
	}
	ds, id := run.dataset(), r.PathValue("id")
	gen, ok, err := run.idx.generation(r.Context(), ds, s.cfg.Reward, id)
	if err == nil && !ok {
		err = fmt.Errorf("%w: no episode %s", errNoScreenshot, id)
	}
	var png []byte
	if err == nil {
		png, err = screenshotPNG(ds, id, step, gen)
	}
	switch {
	case errors.Is(err, errNoScreenshot):
		fail(w, http.StatusNotFound, err)
		return
	case err != nil:
		fail(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Write(png)
}

func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || i < 0 || i >= len(s.reports) {
		fail(w, http.StatusNotFound, fmt.Errorf("view: no report %q", r.PathValue("n")))
		return
	}
	rep := s.reports[i]
	data, err := os.ReadFile(rep.path)
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	if rep.Kind == "html" {
		// The replay report is one self-contained page (its images are
		// data: URLs); it runs sandboxed, without scripts.
		w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Write(data)
}
