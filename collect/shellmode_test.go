package collect

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/forkline/forkline/aci"
	"github.com/forkline/forkline/task"
)

// The policy is told, before the provider opens, that a persistent shell
// goes on in forks on gvisor (its declared capabilities), and nothing new
// on local or docker.
func TestPolicyEpisodeShellFollowsTheProvider(t *testing.T) {
	persistent := &task.Spec{ID: "t", Shell: aci.ShellPersistent}
	fresh := &task.Spec{ID: "t"}
	assert.Equal(t, aci.ShellPersistentForked, policyEpisode(persistent, "", 0, 1, "gvisor").Shell)
	assert.Equal(t, aci.ShellPersistent, policyEpisode(persistent, "", 0, 1, "local").Shell)
	assert.Equal(t, aci.ShellPersistent, policyEpisode(persistent, "", 0, 1, "docker").Shell)
	assert.Equal(t, "", policyEpisode(fresh, "", 0, 1, "gvisor").Shell)
}
