// Package gateway is the model gateway an agent harness talks to: an HTTP
// server that answers the APIs harnesses speak — Anthropic Messages
// (POST /v1/messages, with or without ?beta=true; /v1/messages/count_tokens),
// OpenAI Responses (POST /v1/responses) and Chat Completions
// (POST /v1/chat/completions), each streaming (server-sent events) and not,
// and the models list (GET /v1/models) — by translating each call into the
// canonical conversation (chat messages: system, user, assistant with its
// reasoning and tool calls, tool results; function tools as JSON Schemas),
// handing it to the episode's Handler, and translating the Handler's reply
// back into the harness's API, with the harness's own tool names.
//
// Each episode registers a Handler and gets a credential: the harness sends
// it as its API key (x-api-key, Authorization: Bearer, api-key) and every
// call with it reaches that Handler only, so concurrent episodes never mix;
// a call without a registered credential is refused (401). The model
// server's own key never passes through here. Request bodies are bounded
// (Config.MaxRequestBytes); what cannot be translated (an image, a hosted
// tool's call, a stored response referenced by id) is refused with a 400
// that says what and why, and the episode's Handler is told (Refused).
//
// A streaming call gets its headers at once and an SSE comment every
// Config.KeepAlive while the model works, so a harness's idle timeout does
// not fire on a long generation; the reply is then sent as the API's event
// sequence (Anthropic: message_start, content_block_start/delta/stop,
// message_delta, message_stop; Responses: response.created,
// response.output_item.added, the text/argument deltas and their done
// events, response.output_item.done, response.completed; Chat Completions:
// chunks and [DONE]). A failure after the headers is the API's in-stream
// error event.
//
// The relay (Relay) carries a harness's TCP connections from a loopback
// port inside a sandbox without a network to the gateway's unix socket,
// bind-mounted into the sandbox.
//
// It knows HTTP and the three APIs' wire shapes only: not policies, model
// servers, token ids, sandboxes or datasets.
package gateway
