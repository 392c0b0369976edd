package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/forkline/forkline/pool"
	"github.com/forkline/forkline/runtime"
)

func writeHTTP(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// httpError answers err as FastAPI answers OpenEnv's errors: a status and
// {"detail": ...}, with the OpenEnv error code beside it.
func httpError(w http.ResponseWriter, err error) {
	we := wireErrorOf(err)
	status := http.StatusInternalServerError
	var ce *capacityError
	switch {
	case errors.As(err, &ce):
		we = wireError{Message: ce.Error(), Code: codeCapacityReached, ActiveSessions: &ce.active, MaxSessions: &ce.max}
		status = http.StatusServiceUnavailable
	case we.Code == codeValidation || we.Code == codeInvalidJSON:
		status = http.StatusUnprocessableEntity
	case we.Code == codeSession:
		status = http.StatusServiceUnavailable
	}
	writeHTTP(w, status, map[string]any{"detail": we.Message, "code": we.Code, "active_sessions": we.ActiveSessions, "max_sessions": we.MaxSessions})
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.isDraining() {
		writeHTTP(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy"})
		return
	}
	writeHTTP(w, http.StatusOK, map[string]string{"status": "healthy"})
}

// metadata is OpenEnv's EnvironmentMetadata.
type metadata struct {
	Name             string  `json:"name"`
	Description      string  `json:"description"`
	ReadmeContent    *string `json:"readme_content"`
	Version          *string `json:"version"`
	Author           *string `json:"author"`
	DocumentationURL *string `json:"documentation_url"`
}

func (s *Server) handleMetadata(w http.ResponseWriter, _ *http.Request) {
	v := s.cfg.ToolVersion
	desc := fmt.Sprintf("forkline serve: %d tasks (%s) on %s, every reset a fork of the task's golden checkpoint (reset %s); actions are forkline's canonical actions (see /schema, /tasks)",
		len(s.specs), strings.Join(s.taskIDs(), ", "), s.prov.Name(), s.pool.Strategy())
	// EnvironmentMetadata takes no other keys: the extension is named in
	// the description, and told in full at /extensions.
	if s.branchingAvailable() {
		desc += "; extension " + BranchingExtension + " (checkpoint and release messages, reset from_checkpoint: branches of a session's episode), see /extensions"
	}
	writeHTTP(w, http.StatusOK, metadata{Name: "forkline", Description: desc, Version: &v})
}

func (s *Server) branchingAvailable() bool { return s.pool.Strategy() == pool.Fork }

// handleExtensions is forkline's GET /extensions: the protocol extensions
// this server speaks, with their settings and the JSON Schemas of their
// messages.
func (s *Server) handleExtensions(w http.ResponseWriter, _ *http.Request) {
	writeHTTP(w, http.StatusOK, map[string]any{BranchingExtension: map[string]any{
		"available":           s.branchingAvailable(),
		"messages":            []string{msgCheckpoint, msgRelease},
		"reset_key":           "from_checkpoint",
		"error_codes":         []string{codeCheckpointNotFound, codeCheckpointLimit},
		"max_checkpoints":     s.cfg.MaxCheckpoints,
		"session_checkpoints": s.cfg.SessionCheckpoints,
		"schemas":             branchingSchemas(),
		"documentation":       "docs/serve.md#branching-over-the-wire",
	}})
}

func (s *Server) handleSchema(w http.ResponseWriter, _ *http.Request) {
	writeHTTP(w, http.StatusOK, wireSchemas())
}

// handleState is OpenEnv's GET /state: the state of a fresh environment,
// as its server builds one per request. Sessions' state is the /ws state
// message.
func (s *Server) handleState(w http.ResponseWriter, _ *http.Request) {
	writeHTTP(w, http.StatusOK, State{})
}

// TaskInfo is one task as /tasks lists it (a forkline extension).
type TaskInfo struct {
	ID             string `json:"id"`
	Hash           string `json:"hash"`
	Instruction    string `json:"instruction"`
	MaxSteps       int    `json:"max_steps"`
	ActionTimeout  string `json:"action_timeout"`
	EpisodeTimeout string `json:"episode_timeout"`
	Browser        bool   `json:"browser"`
	Verifier       bool   `json:"verifier"`
}

func (s *Server) handleTasks(w http.ResponseWriter, _ *http.Request) {
	out := make([]TaskInfo, 0, len(s.specs))
	for _, sp := range s.specs {
		out = append(out, TaskInfo{ID: sp.ID, Hash: s.tasks[sp.ID].hash, Instruction: sp.Instruction, MaxSteps: sp.Limits.MaxSteps,
			ActionTimeout: time.Duration(sp.Limits.ActionTimeout).String(), EpisodeTimeout: time.Duration(sp.Limits.EpisodeTimeout).String(),
			Browser: sp.Browser != nil, Verifier: sp.Verify != nil})
	}
	writeHTTP(w, http.StatusOK, out)
}

// readBody reads a one-shot request's JSON object as a WebSocket message
// is read: at most MaxMessageBytes, within the message budget, and whole
// within MessageTimeout. release gives its budget share back once the
// request is answered.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (data []byte, release func(), err error) {
	if r.ContentLength > s.cfg.MaxMessageBytes {
		return nil, nil, refuse(codeValidation, "serve: request body: %d bytes; at most %d (the server's message limit)", r.ContentLength, s.cfg.MaxMessageBytes)
	}
	// The body's whole arrival is bounded by the connection's read
	// deadline (the budget's clock cannot stop it: a request's body is
	// small next to the budget, so it rarely waits).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.MessageTimeout))
	data, release, err = s.budget.read(r.Context(), r.Body, nil)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w (%s, the server's message timeout)", errMessageTimeout, s.cfg.MessageTimeout)
		}
		return nil, nil, refuse(codeValidation, "serve: request body: %v", err)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return data, release, nil
}

// handleReset is OpenEnv's stateless POST /reset: its server builds an
// environment, resets it, answers and closes it. Here: a fork of the
// task's golden (a standby hand-off when ready), the first observation,
// and the fork destroyed; no episode is recorded (it took no step).
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	data, release, err := s.readBody(w, r)
	if err != nil {
		httpError(w, err)
		return
	}
	defer release()
	req, ignored, err := parseReset(data)
	if err != nil {
		httpError(w, err)
		return
	}
	s.oneShotKeys.note(s.cfg.Logger, "POST /reset", ignored, "episode_id", optional(req.EpisodeID))
	if err := s.takeSlot(); err != nil {
		httpError(w, err)
		return
	}
	defer s.releaseSlot()
	l, res, err := s.begin(r.Context(), req, func() {})
	if err != nil {
		httpError(w, err)
		return
	}
	if l.final == nil {
		s.finish(l, runtime.ExitCancelled, "one-shot HTTP /reset: its environment is closed once it answers")
	}
	writeHTTP(w, http.StatusOK, res)
}

// stepRequest is OpenEnv's StepRequest (action, timeout_s, request_id)
// with a reset's keys, which pick the environment the one step runs in.
type stepRequest struct {
	Action    json.RawMessage `json:"action"`
	TimeoutS  *float64        `json:"timeout_s"`
	RequestID *string         `json:"request_id"`
	resetRequest
}

// stepKeys are the keys a one-shot step takes; others are dropped, as
// OpenEnv's StepRequest (extra="allow") takes and drops them.
var stepKeys = []string{"action", "episode_id", "request_id", "seed", "task_id", "timeout_s"}

// handleStep is OpenEnv's stateless POST /step: its server builds a fresh
// environment, steps it once (no reset) and closes it. Here the fresh
// environment is a fork of the task's golden checkpoint — what a reset
// would hand out — so the one step is a one-step episode: the action runs
// (timeout_s caps its time, at most the task's action timeout), a done
// action is verified and answered with its reward, and the fork is
// destroyed. The episode is recorded (as done, or as cancelled after its
// one step), with episode_id, else request_id, as its id.
func (s *Server) handleStep(w http.ResponseWriter, r *http.Request) {
	data, release, err := s.readBody(w, r)
	if err != nil {
		httpError(w, err)
		return
	}
	defer release()
	req, dec, ignored, err := parseStepRequest(data)
	if err != nil {
		httpError(w, err)
		return
	}
	s.oneShotKeys.note(s.cfg.Logger, "POST /step", ignored, "episode_id", optional(req.EpisodeID))
	res, err := s.oneShot(r.Context(), "one-shot HTTP /step", req, dec)
	if err != nil {
		httpError(w, err)
		return
	}
	writeHTTP(w, http.StatusOK, res)
}

// oneShot runs dec as a one-step episode in a fresh fork of the task req
// picks (POST /step, and MCP's stateless tools/call): the action runs
// (req.TimeoutS caps its time, at most the task's action timeout), a done
// action is verified, and the fork is destroyed. what names the caller in
// the episode's detail.
func (s *Server) oneShot(ctx context.Context, what string, req stepRequest, dec runtime.Decision) (StepResult, error) {
	if err := s.takeSlot(); err != nil {
		return StepResult{}, err
	}
	defer s.releaseSlot()
	l, _, err := s.begin(ctx, req.resetRequest, func() {})
	if err != nil {
		return StepResult{}, err
	}
	if l.final != nil {
		return *l.final, nil
	}
	if req.TimeoutS != nil {
		limit := time.Duration(*req.TimeoutS * float64(time.Second))
		if dec.Action.Kind == runtime.ActExec && (dec.Action.TimeoutMS == 0 || time.Duration(dec.Action.TimeoutMS)*time.Millisecond > limit) {
			dec.Action.TimeoutMS = max(limit.Milliseconds(), 1)
		}
	}
	res, err := s.step(ctx, l, dec)
	if err != nil {
		s.finish(l, runtime.ExitCancelled, what+": the client went away before its action was taken")
		return StepResult{}, err
	}
	if l.final == nil {
		s.finish(l, runtime.ExitCancelled, what+": its environment is closed after its one step")
	}
	return res, nil
}

// parseStepRequest reads a one-shot step: the action, and the reset's
// keys; request_id names the episode unless episode_id does. ignored are
// the keys it dropped.
func parseStepRequest(data []byte) (stepRequest, runtime.Decision, []string, error) {
	var req stepRequest
	fields, err := objectFields(data, "step request")
	if err != nil {
		return req, runtime.Decision{}, nil, err
	}
	if _, ok := fields["from_checkpoint"]; ok {
		// forkline's own key, not an extra one: refused, not dropped.
		return req, runtime.Decision{}, nil, refuse(codeValidation, "serve: step request: from_checkpoint: a one-shot step runs in a fresh fork of a task; branching needs a /ws session")
	}
	ignored := dropUnknown(fields, stepKeys)
	action, ok := fields["action"]
	if !ok {
		return req, runtime.Decision{}, nil, refuse(codeValidation, "serve: step request: no action")
	}
	delete(fields, "action")
	if v, ok := fields["timeout_s"]; ok {
		if err := json.Unmarshal(v, &req.TimeoutS); err != nil {
			return req, runtime.Decision{}, nil, refuse(codeValidation, "serve: step request: timeout_s: %v", err)
		}
		delete(fields, "timeout_s")
	}
	if v, ok := fields["request_id"]; ok {
		if err := json.Unmarshal(v, &req.RequestID); err != nil {
			return req, runtime.Decision{}, nil, refuse(codeValidation, "serve: step request: request_id: %v", err)
		}
		delete(fields, "request_id")
	}
	if req.TimeoutS != nil && !(*req.TimeoutS > 0) {
		return req, runtime.Decision{}, nil, refuse(codeValidation, "serve: step request: timeout_s %v: want a number > 0", *req.TimeoutS)
	}
	if err := decodeFields(fields, &req.resetRequest); err != nil {
		return req, runtime.Decision{}, nil, refuse(codeValidation, "serve: step request: %v", err)
	}
	if req.EpisodeID == nil && req.RequestID != nil {
		req.EpisodeID = req.RequestID
	}
	if err := checkReset(req.resetRequest); err != nil {
		return req, runtime.Decision{}, nil, err
	}
	dec, err := parseAction(action)
	return req, dec, ignored, err
}
