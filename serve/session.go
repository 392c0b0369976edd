package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/forkline/forkline/episode"
	"github.com/forkline/forkline/runtime"
)

// writeTimeout bounds sending one message to a client: a client that reads
// nothing for this long is gone.
const writeTimeout = 30 * time.Second

// session is one /ws connection: OpenEnv's one connection, one session,
// one environment. It holds at most one episode at a time; a reset ends
// the one before. Its messages are handled in order, one at a time, by the
// goroutine that runs it.
type session struct {
	srv  *Server
	conn *websocket.Conn
	// connCtx ends when the connection does (the reader saw it fail or
	// close): a reset waiting for its replica stops waiting.
	connCtx    context.Context
	cancelConn context.CancelFunc
	stopCh     chan string   // the server stops it, with why
	done       chan struct{} // closed when run returned
	live       *liveEpisode  // the current or last episode, nil before the first reset
	// checkpoints are the ones this session made and holds (under
	// Server.mu); they are released when it ends.
	checkpoints map[string]*checkpoint
	// ignored logs the reset keys this session sent that were dropped.
	ignored keyLog
}

// liveEpisode is a session's episode: its runner pieces, the driver the
// client steps, and the pool's worker holding its replica.
type liveEpisode struct {
	t   *served
	ep  *episode.Episode
	drv *episode.Driver
	h   *handoff
	// ctx is what the episode runs under, and detach releases it from
	// the connection that drives it (Server.drive).
	ctx    context.Context
	detach func()
	// final is the episode's last reply (without its answer), once it
	// ended and was recorded: the sandbox is gone and steps are refused;
	// drv is then nil, and taken its steps.
	final *StepResult
	taken int

	// prefix is the history the episode was driven from: the instruction,
	// and for a branch the steps it inherits (first of them).
	prefix runtime.History
	first  int
	// prefixMS is how long the inherited steps took, began when this
	// episode's own part began: a checkpoint's branches get what the
	// task's limits leave.
	prefixMS float64
	began    time.Time
	// nextBranch is, per branch step, the index the next branch of this
	// episode at that step gets (under Server.mu): the ids derived from it
	// stay unique even when a checkpoint is released and made again.
	nextBranch map[int]int
}

// stepCount is the steps of the episode's trajectory so far: the inherited
// ones and its own.
func (l *liveEpisode) stepCount() int {
	if l.drv == nil { // ended: finish kept the count
		return l.first + l.taken
	}
	return l.first + l.drv.Steps()
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil) // same-origin only, by default: no browser page elsewhere drives a sandbox
	if err != nil {
		return // Accept answered the request
	}
	// The budget reader enforces the message limit (with the budget); the
	// connection's own limit is only a backstop one byte above it.
	conn.SetReadLimit(s.cfg.MaxMessageBytes + 1)
	if err := s.takeSlot(); err != nil {
		refuseConn(conn, err)
		return
	}
	defer s.releaseSlot()
	ss := &session{srv: s, conn: conn, stopCh: make(chan string, 1), done: make(chan struct{}), checkpoints: map[string]*checkpoint{}}
	ss.connCtx, ss.cancelConn = context.WithCancel(context.Background())
	if !s.addSession(ss) {
		refuseConn(conn, errStopping)
		return
	}
	defer s.removeSession(ss)
	s.stats.sessionOpened()
	ss.run()
}

// refuseConn tells a client why its session cannot open, as OpenEnv does
// (an error message, then the close), and closes the connection.
func refuseConn(conn *websocket.Conn, err error) {
	we := wireErrorOf(err)
	status := websocket.StatusGoingAway
	var ce *capacityError
	if errors.As(err, &ce) {
		we = wireError{Message: ce.Error(), Code: codeCapacityReached, ActiveSessions: &ce.active, MaxSessions: &ce.max}
		status = websocket.StatusTryAgainLater
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	writeJSON(ctx, conn, serverMessage{Type: msgError, Data: we})
	conn.Close(status, closeReason(we.Message))
}

// stop asks the session to end once the message in hand is handled.
func (ss *session) stop(reason string) {
	select {
	case ss.stopCh <- reason:
	default:
	}
}

// run reads and handles the session's messages until the client closes
// it, the connection drops, it idles past IdleTimeout, or the server stops
// it; then its episode ends, is recorded, and its sandbox is destroyed.
func (ss *session) run() {
	defer close(ss.done)
	// Its checkpoints go with it, after its episode ended: the sessions
	// branched from them keep their forks.
	defer ss.releaseCheckpoints()
	defer ss.cancelConn()
	msgs := make(chan inbound)
	readErr := make(chan error, 1)
	go func() {
		for {
			data, release, err := ss.readMessage()
			if err != nil {
				// The connection is gone (dropped, closed, a message too
				// big or too slow): connCtx ends, and with it the step in
				// flight (see Server.drive).
				readErr <- err
				ss.cancelConn()
				return
			}
			select {
			case msgs <- inbound{data: data, release: release}:
			case <-ss.connCtx.Done():
				release()
				return
			}
		}
	}()
	idle := newIdleTimer(ss.srv.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		// A stop wins over a message that waits: the server is stopping.
		select {
		case reason := <-ss.stopCh:
			ss.endEpisode(reason)
			ss.conn.Close(websocket.StatusGoingAway, closeReason("forkline serve: "+reason))
			return
		default:
		}
		select {
		case reason := <-ss.stopCh:
			ss.endEpisode(reason)
			ss.conn.Close(websocket.StatusGoingAway, closeReason("forkline serve: "+reason))
			return
		case <-idle.C():
			why := fmt.Sprintf("idle for %s: the session was reaped (the server's idle timeout)", ss.srv.cfg.IdleTimeout)
			ss.srv.stats.reaped()
			ss.endEpisode(why)
			ss.conn.Close(websocket.StatusPolicyViolation, closeReason("forkline serve: "+why))
			return
		case err := <-readErr:
			why := "the connection dropped: " + err.Error()
			switch {
			case cleanClose(err):
				why = "the client closed the connection"
			case errors.Is(err, errTooBig) || errors.Is(err, websocket.ErrMessageTooBig):
				why = fmt.Sprintf("the client sent a message of more than %d bytes (the server's message limit)", ss.srv.cfg.MaxMessageBytes)
				// The close frame tells the client why; the handshake is
				// not waited for (the rest of the message may never come).
				stop := time.AfterFunc(time.Second, func() { ss.conn.CloseNow() })
				ss.conn.Close(websocket.StatusMessageTooBig, closeReason("forkline serve: "+why))
				stop.Stop()
			case errors.Is(err, errMessageTimeout):
				why = fmt.Sprintf("a message that began did not arrive within %s (the server's message timeout)", ss.srv.cfg.MessageTimeout)
			default:
				ss.srv.stats.dropped()
			}
			ss.endEpisode(why)
			ss.conn.CloseNow()
			return
		case in := <-msgs:
			closing, err := ss.handle(&in)
			if err != nil { // the reply could not be sent: the client is gone
				ss.srv.stats.dropped()
				ss.endEpisode("the connection dropped: " + err.Error())
				ss.conn.CloseNow()
				return
			}
			if closing {
				ss.endEpisode("the client closed the session")
				ss.conn.Close(websocket.StatusNormalClosure, "")
				return
			}
			idle.Reset()
		}
	}
}

// inbound is a message as read: its bytes, and its share of the server's
// message budget, given back once it is handled.
type inbound struct {
	data    []byte
	release func()
}

// readMessage reads the next message: it waits for one to begin for as
// long as it takes (the idle timer reaps a silent session), then reads it
// within the message budget, at most MaxMessageBytes, and within
// MessageTimeout.
func (ss *session) readMessage() ([]byte, func(), error) {
	ctx, cancel := context.WithCancelCause(ss.connCtx)
	defer cancel(nil)
	_, r, err := ss.conn.Reader(ctx)
	if err != nil {
		return nil, nil, err
	}
	clock := newArrival(ss.srv.cfg.MessageTimeout, func() { cancel(errMessageTimeout) })
	defer clock.stop()
	data, release, err := ss.srv.budget.read(ss.connCtx, r, clock)
	if err != nil {
		if errors.Is(err, errMessageTimeout) || errors.Is(context.Cause(ctx), errMessageTimeout) {
			return nil, nil, errMessageTimeout
		}
		return nil, nil, err
	}
	return data, release, nil
}

// handle answers one message. closing is set for a close message; the
// error is a reply that could not be sent. The message's budget share is
// given back once it is answered, so that the copies its handling makes
// (the decoded action, its recorded JSON, a reply that echoes it) are
// counted with it.
func (ss *session) handle(in *inbound) (closing bool, err error) {
	defer in.release()
	m, perr := parseClientMessage(in.data)
	in.data = nil // decoded: the raw bytes go while the step runs
	if perr == nil {
		var reply any
		switch m.Type {
		case msgClose:
			return true, nil
		case msgState:
			return false, ss.send(msgState, ss.state())
		case msgReset:
			reply, perr = ss.reset(m.Data)
		case msgStep:
			reply, perr = ss.step(m.Data)
		case msgCheckpoint:
			var cp CheckpointInfo
			if cp, perr = ss.checkpoint(); perr == nil {
				return false, ss.send(msgCheckpoint, cp)
			}
		case msgRelease:
			var id string
			if id, perr = ss.release(m.Data); perr == nil {
				return false, ss.send(msgReleased, map[string]string{"checkpoint_id": id})
			}
		}
		if perr == nil {
			return false, ss.send(msgObservation, reply)
		}
	}
	return false, ss.send(msgError, wireErrorOf(perr))
}

func (ss *session) send(typ string, data any) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return writeJSON(ctx, ss.conn, serverMessage{Type: typ, Data: data})
}

func writeJSON(ctx context.Context, conn *websocket.Conn, m serverMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

// reset ends the session's episode, if one is running, and begins a new
// one on a fork of the chosen task's golden checkpoint. Bad parameters
// leave the running episode as it was.
func (ss *session) reset(data []byte) (any, error) {
	req, ignored, err := parseReset(data)
	if err != nil {
		return nil, err
	}
	ss.ignored.note(ss.srv.cfg.Logger, "/ws reset", ignored, "episode_id", optional(req.EpisodeID))
	if ss.srv.isDraining() {
		return nil, errStopping
	}
	l, res, err := ss.srv.begin(ss.connCtx, req, func() {
		if ss.live != nil && ss.live.final == nil {
			ss.srv.finish(ss.live, runtime.ExitCancelled, fmt.Sprintf("the client reset the session after %d steps", ss.live.stepCount()))
		}
	})
	if err != nil {
		return nil, err
	}
	ss.live = l
	return res, nil
}

// step takes one action in the session's episode.
func (ss *session) step(data []byte) (any, error) {
	l := ss.live
	if l == nil {
		return nil, refuse(codeExecution, "serve: step: this session has no episode: send reset first")
	}
	if l.final != nil {
		return nil, refuse(codeExecution, "serve: step: episode %s has ended (%s); send reset to start another", l.ep.Row.EpisodeID, l.ep.Row.ExitReason)
	}
	dec, err := parseAction(data)
	if err != nil {
		return nil, err
	}
	return ss.srv.step(ss.connCtx, l, dec)
}

// state is the session's State.
func (ss *session) state() State {
	l := ss.live
	if l == nil {
		return State{}
	}
	id := l.ep.Row.EpisodeID
	st := State{EpisodeID: &id, StepCount: l.stepCount(), TaskID: l.t.spec.ID}
	if l.final != nil {
		st.Done, st.ExitReason, st.Reward = true, l.ep.Row.ExitReason, l.final.Reward
	}
	st.Checkpoints = ss.checkpointIDs()
	return st
}

// endEpisode ends the session's running episode, if any, as cancelled
// with why, and records it.
func (ss *session) endEpisode(why string) {
	if l := ss.live; l != nil && l.final == nil {
		ss.srv.finish(l, runtime.ExitCancelled, why)
	}
}

// closeReason cuts a close reason to the 123 bytes a close frame holds.
func closeReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	cut := 120
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}

// idleTimer is a resettable timer; a zero timeout never fires.
type idleTimer struct {
	d time.Duration
	t *time.Timer
}

func newIdleTimer(d time.Duration) *idleTimer {
	it := &idleTimer{d: d}
	if d > 0 {
		it.t = time.NewTimer(d)
	}
	return it
}

func (it *idleTimer) C() <-chan time.Time {
	if it.t == nil {
		return nil
	}
	return it.t.C
}

func (it *idleTimer) Reset() {
	if it.t != nil {
		it.t.Reset(it.d)
	}
}

func (it *idleTimer) Stop() {
	if it.t != nil {
		it.t.Stop()
	}
}

// cleanClose reports whether a read ended with the client's close frame
// rather than a dropped connection: normal closure, going away, or a close
// frame without a status code (1005), which a WebSocket client's close()
// with no code sends.
func cleanClose(err error) bool {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway, websocket.StatusNoStatusRcvd:
		return true
	}
	return false
}
