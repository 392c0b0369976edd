package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/forkline/forkline/policy"
)

var _ policy.Checker = source{}

// checkTimeout bounds the models request of Check.
const checkTimeout = 10 * time.Second

// Check asks the server's GET /models (OpenAI's model list, which vLLM and
// SGLang serve) before a run: an address where nothing answers is an error
// wrapping runtime.ErrUnavailable (the service is not there, yet); one that
// refuses the API key, or a model option naming a model the list does not
// hold, is an error too. A server without the route (404) is let through:
// it answered, and not every OpenAI-compatible server lists its models.
func (s source) Check(ctx context.Context) error {
	urls, err := parseServerURL(s.cfg.BaseURL, "base_url")
	if err != nil {
		return fmt.Errorf("openai: %w", err)
	}
	url := urls.api("/models")
	timeout := min(s.cfg.Timeout, checkTimeout)
	if timeout <= 0 {
		timeout = checkTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("openai: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if key := os.Getenv(s.cfg.APIKeyEnv); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	hc := s.cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		nothing := unreachable(err) || errors.Is(err, context.DeadlineExceeded)
		err = fmt.Errorf("openai: no model server answers at %s (GET %s: %v); start it, or check base_url", s.cfg.BaseURL, url, scrubURL(err))
		if nothing {
			// Nothing there (yet): the run's service is unavailable, as
			// during a run, not the run's input wrong.
			return &unavailableError{err: err}
		}
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("openai: the model server at %s refused the request (HTTP %d to GET %s): check the API key in $%s", s.cfg.BaseURL, resp.StatusCode, url, s.cfg.APIKeyEnv)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("openai: the model server at %s answered HTTP %d to GET %s: %s", s.cfg.BaseURL, resp.StatusCode, url, oneLine(string(body), 200))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || s.cfg.Model == "" || len(list.Data) == 0 {
		return nil // an answer without a usable list: the server is there
	}
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	if !slices.Contains(ids, s.cfg.Model) {
		slices.Sort(ids)
		if len(ids) > 10 {
			ids = append(ids[:10], "…")
		}
		return fmt.Errorf("openai: model %q is not among the models the server at %s serves (%s): set -model to one of them", s.cfg.Model, s.cfg.BaseURL, strings.Join(ids, ", "))
	}
	return nil
}

// oneLine keeps the first n bytes of s on one line.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// scrubURL is err without the request's URL when it is a *url.Error: the
// message then says only what went wrong (the URL is named already).
func scrubURL(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && strings.HasPrefix(err.Error(), "Get ") {
		if inner := u.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
