package export

import "github.com/forkline/forkline/formats/atif"

// The atif target lives in its own file and registers itself, so that it
// touches none of the other targets' code.
func init() {
	targets["atif"] = targetSpec{
		summary: "Harbor's Agent Trajectory Interchange Format (" + atif.SchemaVersion + "): one trajectory JSON per episode, token ids and logprobs in each agent step's metrics",
		layout:  "DIR/<split>/<episode_id>.json",
		options: []string{"ToolArgs", "Reasoning"},
		open: func(dir string, c *openContext) (sink, error) {
			conv := c.o.conversation()
			return atif.NewWriter(dir, c.splits, atif.Options{Conversation: conv, ToolVersion: func(run string) string { return c.toolVersions[run] }}), nil
		},
	}
}
