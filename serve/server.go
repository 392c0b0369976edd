package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/fielderr"
	"github.com/forkline/forkline/formats/shard"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/providers"
	"github.com/forkline/forkline/task"
)

// Run serves cfg's tasks until ctx is cancelled, then drains: no new
// session or reset is accepted, the steps in flight finish (for at most
// Grace), every open episode ends as cancelled and is recorded, every
// sandbox is destroyed, and the dataset is closed complete. It returns what
// was served. Bad input (ErrConfig) changes nothing: the address, the
// tasks, the provider and the output directory are all checked before the
// first connection is accepted.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	s, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s.serve(ctx)
}

// Server is one running server: its tasks, the pool over the provider, the
// recording, and the sessions.
type Server struct {
	cfg   Config
	ln    net.Listener
	specs []*task.Spec // sorted by id: a seed picks specs[seed mod len]
	tasks map[string]*served
	env   *episode.Env // the provider and pool, opened once (episode.OpenEnv)
	prov  providers.Provider
	pool  *pool.Pool
	jobs  chan pool.Job
	// poolDone is closed when the pool's Run returned (every replica it
	// handed out came back).
	poolDone chan struct{}
	runner   episode.Runner
	rec      *recorder // nil without Out
	runID    string

	// runCtx is what episodes and resets run under: cancelled only when
	// the drain's grace is over (or the server failed to start), so a
	// stopping server finishes the steps in flight.
	runCtx    context.Context
	cancelRun context.CancelFunc
	http      *http.Server

	slots  chan struct{} // MaxSessions
	budget *budget       // the bytes of messages in flight (limits.go)

	mu         sync.Mutex
	sessions   map[*session]bool
	draining   bool
	ids        map[string]bool // episode ids recorded or in play: a reset may not reuse one
	roundRobin int
	stats      *stats
	obs        observe.Observer // cfg.Observer, or one that does nothing
	// checkpoints are the live branch points sessions made, by id.
	checkpoints map[string]*checkpoint

	// holding keeps, for each checkpointed episode still in play, the
	// rows of its branches that ended before it: a branch is committed
	// only after its parent, so the dataset never holds one without the
	// prefix it continues (a crash loses the held rows with the parent).
	holdMu  sync.Mutex
	holding map[string][]shard.EpisodeBatch

	// oneShotKeys logs the envelope keys the one-shot HTTP forms and the
	// stateless MCP calls dropped (each key once per server).
	oneShotKeys keyLog
	// mcpSessions are the sessions opened over POST /mcp with OpenEnv's
	// openenv/session/create, by id (under mu).
	mcpSessions map[string]*mcpSession
}

// served is one task as the server serves it.
type served struct {
	spec     *task.Spec
	hash     string
	template *pool.Template
	repeats  int // episodes of it served so far (the repeat column)
}

// open checks cfg, loads the tasks, listens, opens the provider and the
// pool, then the dataset: everything that can refuse bad input, before
// anything is served.
func open(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, badInput(err)
	}
	specs, err := task.Load(cfg.Tasks)
	if err != nil {
		return nil, badInput(err)
	}
	s := &Server{cfg: cfg, tasks: map[string]*served{}, jobs: make(chan pool.Job), poolDone: make(chan struct{}),
		slots: make(chan struct{}, cfg.MaxSessions), sessions: map[*session]bool{}, ids: map[string]bool{}, stats: newStats(),
		checkpoints: map[string]*checkpoint{}, holding: map[string][]shard.EpisodeBatch{},
		budget: newBudget(cfg.MessageBudget, cfg.MaxMessageBytes)}
	// The stats' tally is told of the episodes as every observer is.
	s.obs = observe.Multi{s.stats.tally, cfg.Observer}
	for i := range specs {
		sp := specs[i].WithDefaults()
		tmpl, err := episode.Template(&sp)
		if err != nil {
			return nil, badInput(fmt.Errorf("serve: task %s (%s): %w", sp.ID, sp.Source, err))
		}
		s.tasks[sp.ID] = &served{spec: &sp, hash: sp.Hash(), template: tmpl}
		s.specs = append(s.specs, &sp)
	}
	sort.Slice(s.specs, func(a, b int) bool { return s.specs[a].ID < s.specs[b].ID })
	if len(s.specs) == 0 {
		return nil, badInput(fmt.Errorf("serve: %s holds no task", cfg.Tasks))
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, badInput(fielderr.New("serve", "Addr", cfg.Addr, err))
	}
	s.ln = ln
	if !loopback(ln.Addr()) {
		cfg.Logger.Warn("serve: listening beyond loopback: whoever reaches this address runs commands in the sandboxes", "addr", ln.Addr().String())
	}
	fail := func(err error) (*Server, error) {
		ln.Close()
		if s.env != nil {
			s.env.Close(context.WithoutCancel(ctx))
		}
		return nil, err
	}

	// The provider labels its objects with a run id of this process's own
	// (docker's sweep tells a live server from a crashed one by it); the
	// rows carry the dataset's, which a resumed dataset keeps.
	s.runID = newRunID()
	list := make([]task.Spec, len(s.specs))
	templates := make(map[string]*pool.Template, len(s.specs))
	for i, sp := range s.specs {
		list[i] = *sp
		templates[sp.ID] = s.tasks[sp.ID].template
	}
	// The pool's workers hold a replica from its hand-off until its sandbox
	// is destroyed, which runs after the episode ended: twice as many
	// workers as sessions, so that a session's next reset never waits for
	// its last sandbox's teardown. Sessions themselves are bounded by slots.
	maxCreates := cfg.MaxCreates
	if maxCreates == 0 {
		maxCreates = 2 * cfg.MaxSessions
	}
	logf := func(format string, args ...any) { cfg.Logger.Warn("serve: " + fmt.Sprintf(format, args...)) }
	s.env, err = episode.OpenEnv(ctx, episode.EnvConfig{
		Provider: cfg.Provider, Options: providers.Options{RunID: s.runID, Dir: cfg.WorkDir, Params: cfg.ProviderParams},
		Specs: list, Templates: templates,
		Pool: pool.Config{Replicas: 2 * cfg.MaxSessions, Strategy: cfg.Reset, Standby: cfg.Standby, MaxCreates: maxCreates, MaxBranches: cfg.MaxCheckpoints,
			Log: func(format string, args ...any) { logf("pool: "+format, args...) }, OnGolden: s.onGolden},
		Logf: logf,
	})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fail(fmt.Errorf("serve: %w", ctx.Err()))
	case errors.Is(err, context.Canceled):
		return fail(err)
	default:
		return fail(badInput(err))
	}
	s.prov, s.pool = s.env.Provider, s.env.Pool
	if cfg.Out != "" {
		if s.rec, err = openRecorder(cfg, s.runID, list, s.env.Record); err != nil {
			return fail(err)
		}
		for id := range s.rec.w.Committed() {
			s.ids[id] = true
		}
	}
	s.runner = episode.Runner{RunID: s.runID, Provider: s.prov.Name(), Capture: cfg.Capture, Observer: s.obs}
	if s.rec != nil {
		s.runner.RunID = s.rec.runID
	}
	return s, nil
}

// serve accepts connections until ctx is cancelled, then drains.
func (s *Server) serve(ctx context.Context) (*Summary, error) {
	began := time.Now()
	s.runCtx, s.cancelRun = context.WithCancel(context.WithoutCancel(ctx))
	defer s.cancelRun()
	go func() {
		defer close(s.poolDone)
		s.pool.Run(s.runCtx, s.jobs, s.handOver)
	}()
	if s.cfg.Standby > 0 {
		for _, sp := range s.specs {
			s.pool.Expect(s.runCtx, s.tasks[sp.ID].template, s.cfg.Standby)
		}
	}
	s.obs.Observe(observe.RunStarted{Command: "serve", RunID: s.runner.RunID, Replicas: 2 * s.cfg.MaxSessions, Live: func() observe.Live {
		o := s.pool.Occupancy()
		return observe.Live{Replicas: o.Replicas, Busy: o.Busy, Standby: o.Standby}
	}})
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second, BaseContext: func(net.Listener) context.Context { return s.runCtx }}
	served := make(chan error, 1)
	go func() { served <- s.http.Serve(s.ln) }()
	s.cfg.Logger.Info("serve: listening", "addr", s.ln.Addr().String(), "tasks", len(s.specs), "provider", s.prov.Name(),
		"reset", string(s.pool.Strategy()), "standby", s.cfg.Standby, "max_sessions", s.cfg.MaxSessions, "out", s.cfg.Out)
	if s.cfg.Ready != nil {
		s.cfg.Ready(s.ln.Addr())
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	s.drain()
	sum := s.stats.summary(time.Since(began), s.pool.Stats())
	sum.Addr, sum.Dataset = s.ln.Addr().String(), s.cfg.Out
	closeErr := s.closeAll(sum)
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	if serveErr != nil {
		serveErr = fmt.Errorf("serve: %w", serveErr)
	}
	status := string(shard.StatusComplete)
	if serveErr != nil || closeErr != nil {
		status = string(shard.StatusPartial)
	}
	s.obs.Observe(observe.RunEnded{Status: status, Err: errors.Join(serveErr, closeErr)})
	return sum, errors.Join(serveErr, closeErr)
}

// drain stops the server: no new session or request, the steps in flight
// finish (a grace timer interrupts them after Grace), every session ends,
// and the pool gets every replica back.
func (s *Server) drain() {
	s.mu.Lock()
	s.draining = true
	open := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		open = append(open, ss)
	}
	s.mu.Unlock()
	s.cfg.Logger.Info("serve: stopping: steps in flight finish, then every session is closed", "sessions", len(open), "grace", s.cfg.Grace.String())
	// MCP sessions between calls end now, before the grace can interrupt
	// anything; those in a call end once it is answered (below).
	s.closeMCPSessions("the server stopped", false)
	grace := time.AfterFunc(s.cfg.Grace, func() {
		s.cfg.Logger.Warn("serve: grace is over: interrupting what still runs")
		s.cancelRun()
	})
	defer grace.Stop()
	for _, ss := range open {
		ss.stop("the server stopped")
	}
	// One-shot HTTP requests finish; the listener closes. Hijacked
	// WebSocket connections are the sessions', waited for below.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.Grace+10*time.Second)
	s.http.Shutdown(shutdownCtx)
	cancel()
	// MCP sessions live between requests: with every request answered,
	// they end here.
	s.closeMCPSessions("the server stopped", true)
	for _, ss := range open {
		<-ss.done
	}
	s.mu.Lock()
	late := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		late = append(late, ss)
	}
	s.mu.Unlock()
	for _, ss := range late { // accepted while the drain began
		ss.stop("the server stopped")
		<-ss.done
	}
	// Every session has ended and every one-shot returned (or overran
	// its grace): the pool stops taking jobs, once its workers have the
	// last replicas back. A reset still waiting (a one-shot past the
	// shutdown's bound) is answered that the server is stopping; the jobs
	// channel is never closed, so a late send cannot panic.
	s.cancelRun()
	<-s.poolDone
}

// closeAll closes the pool (standbys, goldens), the provider and the
// dataset.
func (s *Server) closeAll(sum *Summary) error {
	closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if err := s.env.Close(closeCtx); err != nil {
		errs = append(errs, fmt.Errorf("serve: %w", err))
	}
	if s.rec != nil {
		if err := s.rec.close(sum); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Handler is the server's HTTP handler: /ws and the HTTP endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes() { // the table GET /openapi.json describes
		mux.HandleFunc(rt.method+" "+rt.path, rt.handler)
	}
	return mux
}

// acquired is what the pool handed a reset: a ready replica, or why none.
type acquired struct {
	replica pool.Replica
	err     error
}

// handoff is one reset's request to the pool, and the way back.
type handoff struct {
	ready     chan acquired     // the pool's answer
	abandoned chan struct{}     // closed when the reset stopped waiting
	outcome   chan pool.Outcome // the episode's end: the pool destroys the sandbox
}

// handOver runs on a pool worker: it hands the replica to the waiting
// reset and holds the worker slot until the episode gives it back.
func (s *Server) handOver(_ context.Context, job pool.Job, r pool.Replica, err error) pool.Outcome {
	h := job.Payload.(*handoff)
	select {
	case h.ready <- acquired{r, err}:
	case <-h.abandoned:
		return pool.Done
	}
	if err != nil {
		return pool.Done
	}
	return <-h.outcome
}

// acquire asks the pool for a replica of t and waits for it; ctx (a
// dropped client) abandons the wait. Its duration is the reset latency as
// the server sees it: a standby hand-off, or a fork and start commands
// (with any wait for a creation slot).
//
// With from set, the replica is a fork of that branch point instead (with
// the task's branch_start commands).
func (s *Server) acquire(ctx context.Context, t *served, from *pool.Branch) (pool.Replica, *handoff, error) {
	h := &handoff{ready: make(chan acquired, 1), abandoned: make(chan struct{}), outcome: make(chan pool.Outcome, 1)}
	select {
	case s.jobs <- pool.Job{Template: t.template, Branch: from, Payload: h}:
	case <-ctx.Done():
		return pool.Replica{}, nil, ctx.Err()
	case <-s.runCtx.Done():
		return pool.Replica{}, nil, errStopping
	}
	if s.cfg.Standby > 0 && from == nil {
		// The server expects the next reset of this task as soon as one
		// comes: the standby refills what was taken.
		s.pool.Expect(s.runCtx, t.template, 1)
	}
	select {
	case a := <-h.ready:
		if a.err != nil {
			return pool.Replica{}, nil, a.err
		}
		return a.replica, h, nil
	case <-ctx.Done():
		close(h.abandoned)
		return pool.Replica{}, nil, ctx.Err()
	case <-s.runCtx.Done():
		close(h.abandoned)
		return pool.Replica{}, nil, errStopping
	}
}

var errStopping = refuse(codeSession, "serve: the server is stopping")

// pickTask chooses the task of a reset: task_id when given, else
// specs[seed mod len] (deterministic: a trainer that walks seeds 0..n-1
// walks every task once), else the next task in id order, round-robin.
func (s *Server) pickTask(r resetRequest) (*served, error) {
	switch {
	case r.TaskID != nil:
		t, ok := s.tasks[*r.TaskID]
		if !ok {
			return nil, refuse(codeValidation, "serve: reset: unknown task_id %q (known: %s)", *r.TaskID, strings.Join(s.taskIDs(), ", "))
		}
		return t, nil
	case r.Seed != nil:
		return s.tasks[s.specs[*r.Seed%int64(len(s.specs))].ID], nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[s.specs[s.roundRobin%len(s.specs)].ID]
	s.roundRobin++
	return t, nil
}

func (s *Server) taskIDs() []string {
	ids := make([]string, len(s.specs))
	for i, sp := range s.specs {
		ids[i] = sp.ID
	}
	return ids
}

// claim reserves an episode id for a new episode: the one the client gave
// (refused when the dataset or a live session has it), or a fresh one. It
// also counts the task's repeat.
func (s *Server) claim(given string, t *served) (id string, repeat int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if given != "" {
		if s.ids[given] {
			return "", 0, refuse(codeValidation, "serve: reset: episode_id %q is taken: an episode of this server or its dataset has it (episode ids are unique in a dataset)", given)
		}
		id = given
	} else {
		for id == "" || s.ids[id] {
			id = randomID()
		}
	}
	s.ids[id] = true
	repeat = t.repeats
	t.repeats++
	return id, repeat, nil
}

// unclaim frees an id whose episode never began (its reset failed), so
// that the client may retry with it.
func (s *Server) unclaim(id string) {
	s.mu.Lock()
	delete(s.ids, id)
	s.mu.Unlock()
}

// takeSlot takes a session slot, or says the server is full or stopping.
func (s *Server) takeSlot() error {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return errStopping
	}
	select {
	case s.slots <- struct{}{}:
		return nil
	default:
		return errCapacity(len(s.slots), cap(s.slots))
	}
}

func (s *Server) releaseSlot() { <-s.slots }

func errCapacity(active, max int) *capacityError {
	return &capacityError{active: active, max: max}
}

// capacityError is CAPACITY_REACHED, with OpenEnv's counts.
type capacityError struct{ active, max int }

func (e *capacityError) Error() string {
	return fmt.Sprintf("serve: the server is at capacity: %d of %d sessions open (its limit)", e.active, e.max)
}

func (s *Server) addSession(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.sessions[ss] = true
	return true
}

func (s *Server) removeSession(ss *session) {
	s.mu.Lock()
	delete(s.sessions, ss)
	s.mu.Unlock()
}

func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func randomID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func newRunID() string {
	var b [6]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
