package stopguard

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The canary tells a stop under way from a canary killed on its own: a
// signal on it strikes it at once (the hint an episode that ends before
// the collector's own signal acts on), a SIGKILL from the collector does
// not, and once a killed canary is older than Wait it is struck no
// more and says nothing of a later stop — otherwise, after a `pkill
// sleep` on the host, every episode would wait for a signal that never
// comes.
func TestCanaryStruckOnlyByARecentSignal(t *testing.T) {
	c := Start()
	require.NotNil(t, c, "sleep(1) is on the PATH")
	// (Just started, it may not be asleep yet.)
	require.Eventually(t, func() bool { return !c.Struck() }, time.Second, time.Millisecond, "a canary asleep is not struck")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, c.Struck, time.Second, time.Millisecond, "a pending or delivered SIGTERM strikes it")
	<-c.gone
	require.True(t, c.Struck())
	require.True(t, c.Reached(time.Now()), "a stop that comes now reached it")
	time.Sleep(Wait + 100*time.Millisecond)
	require.False(t, c.Struck(), "killed long ago: no stop is under way")
	require.False(t, c.Reached(time.Now()), "and it says nothing of a stop that comes now")

	k := Start()
	require.NotNil(t, k)
	k.Close()
	require.False(t, k.Struck(), "the program's own SIGKILL is no stop")
	require.False(t, k.Reached(time.Now()))
}
