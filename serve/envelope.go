package serve

import (
	"log/slog"
	"strings"
	"sync"
)

// keyLog says in the log which request-envelope keys the server dropped
// (a reset's data, a one-shot's body, an MCP call's params: the keys
// OpenEnv's server accepts and does not pass on), each key once per
// session, so that a trainer sending "render" with every step logs it
// once, and a misspelt task_id shows. The one-shot HTTP forms and the
// stateless MCP calls are a session each; the server keeps one keyLog for
// all of them, or every request would log again.
type keyLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

// optional is *p, or "" for nil (a log attribute).
func optional(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// note logs the keys of ignored not logged before by this keyLog, with
// where they came and attrs (slog's key-value pairs).
func (k *keyLog) note(log *slog.Logger, where string, ignored []string, attrs ...any) {
	if len(ignored) == 0 {
		return
	}
	k.mu.Lock()
	var fresh []string
	for _, key := range ignored {
		if !k.seen[key] {
			if k.seen == nil {
				k.seen = map[string]bool{}
			}
			k.seen[key] = true
			fresh = append(fresh, key)
		}
	}
	k.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	log.Warn("serve: ignoring request keys forkline does not take, as OpenEnv's server ignores them (logged once per session)",
		append([]any{"where", where, "keys", strings.Join(fresh, ",")}, attrs...)...)
}
