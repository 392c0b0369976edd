package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/semaphore"
)

// What a client sends is bounded three ways, so that no client — a
// careless one, a hostile one, sixty-four at once — can take the server's
// memory or hold a session slot with a message that never ends:
//
//   - one message (a WebSocket message, a one-shot request's body) holds at
//     most Config.MaxMessageBytes; a longer one ends its session with
//     close status 1009 (message too big), or 413 for a request;
//   - the messages being received and handled at once hold at most
//     Config.MessageBudget bytes between them (a server-wide byte budget):
//     a message takes a small share as it begins, and the whole
//     MaxMessageBytes once it grows past that share; a message that finds
//     the budget taken waits (its sender is held back by TCP flow
//     control). A share is given back once the message is answered, so
//     the copies its handling makes (the decoded action, its recorded
//     JSON, a reply that echoes it, the rows of an episode it ends) are
//     bounded with it: a handful of large messages are handled at once,
//     however many sessions send one, and small ones never wait (a small
//     share for each of 64 sessions is 4 MiB);
//   - a message that has begun arrives whole within
//     Config.MessageTimeout, or its session ends (a frame header that
//     claims megabytes and then stalls no longer holds a slot until the
//     idle timeout).
//
// What an episode keeps of its steps until it ends (the recorded actions
// and observations, as collect keeps them) is the episode's record, bounded
// per step by MaxMessageBytes and the task's output cap, and per episode by
// its max_steps; it is not part of the budget.

// smallShare is the budget share a message takes as it begins: most
// messages (a step's command, a reset) fit in it, and taking the whole
// MaxMessageBytes for each would let a few sessions' small messages wait on
// one large one.
const smallShare = 64 << 10

// errMessageTimeout ends a session whose message stopped arriving.
var errMessageTimeout = errors.New("a message that began did not arrive within the message timeout")

// errTooBig is a message over MaxMessageBytes.
var errTooBig = errors.New("message too big")

// budget is the server-wide byte budget of messages in flight.
type budget struct {
	sem        *semaphore.Weighted
	maxMessage int64
}

func newBudget(total, maxMessage int64) *budget {
	return &budget{sem: semaphore.NewWeighted(total), maxMessage: maxMessage}
}

// arrival is the deadline of a message that began: MessageTimeout of
// arriving, not counting the time it waits for the budget (its sender is
// then held back by the server, not stalling).
type arrival struct {
	timer   *time.Timer
	left    time.Duration
	armedAt time.Time
}

// newArrival starts the clock: expire is called when the message has
// taken d to arrive.
func newArrival(d time.Duration, expire func()) *arrival {
	return &arrival{timer: time.AfterFunc(d, expire), left: d, armedAt: time.Now()}
}

// pause stops the clock; it reports false when the time is already up.
func (a *arrival) pause() bool {
	if a == nil {
		return true
	}
	if !a.timer.Stop() {
		return false
	}
	a.left -= time.Since(a.armedAt)
	return a.left > 0
}

// resume starts the clock again with the time left.
func (a *arrival) resume() {
	if a != nil {
		a.armedAt = time.Now()
		a.timer.Reset(a.left)
	}
}

// stop ends the clock.
func (a *arrival) stop() {
	if a != nil {
		a.timer.Stop()
	}
}

// read reads one message from r, at most maxMessage bytes, within the
// budget: a small share first, then, when the message is longer, the small
// share is given back and the whole maxMessage taken (never one held while
// waiting for the other, so messages waiting on the budget cannot deadlock
// each other). release gives the share back; call it once the message is
// answered. wait bounds the waits for the budget (the connection's life);
// the clock of arrival stops while the message waits. r reads under its
// own context (the caller's, which arrival's expiry ends).
func (b *budget) read(wait context.Context, r io.Reader, clock *arrival) (data []byte, release func(), err error) {
	held := int64(min(smallShare, b.maxMessage))
	if err := b.acquire(wait, held, clock); err != nil {
		return nil, nil, err
	}
	release = func() {
		if held > 0 {
			b.sem.Release(held)
			held = 0
		}
	}
	buf := make([]byte, 0, min(4<<10, held))
	buf, err = readUpTo(r, buf, held)
	if err == nil || !errors.Is(err, errFull) {
		if err != nil {
			release()
			return nil, nil, err
		}
		return buf, release, nil
	}
	// Longer than the small share: the whole maximum, then the rest.
	release()
	if err := b.acquire(wait, b.maxMessage, clock); err != nil {
		return nil, nil, err
	}
	held = b.maxMessage
	// The whole share is held: the buffer takes it at once (one
	// allocation, no garbage of doubling).
	grown := make([]byte, len(buf), b.maxMessage+1)
	copy(grown, buf)
	buf, err = readUpTo(r, grown, b.maxMessage)
	if err != nil {
		release()
		if errors.Is(err, errFull) {
			return nil, nil, fmt.Errorf("%w: more than %d bytes (the server's message limit)", errTooBig, b.maxMessage)
		}
		return nil, nil, err
	}
	return buf, release, nil
}

// acquire takes n bytes of the budget, the arrival clock stopped while it
// waits.
func (b *budget) acquire(wait context.Context, n int64, clock *arrival) error {
	if b.sem.TryAcquire(n) {
		return nil
	}
	if !clock.pause() {
		return errMessageTimeout
	}
	if err := b.sem.Acquire(wait, n); err != nil {
		return err
	}
	clock.resume()
	return nil
}

// errFull is readUpTo's: r holds more than limit bytes.
var errFull = errors.New("more than the limit")

// readUpTo appends r to buf until EOF, growing buf as needed, and fails
// with errFull once more than limit bytes in all were read.
func readUpTo(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return buf, errFull
			}
			next := min(max(2*int64(cap(buf)), 4<<10), limit+1)
			if next <= int64(cap(buf)) {
				next = int64(cap(buf)) + 1
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, errFull
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
