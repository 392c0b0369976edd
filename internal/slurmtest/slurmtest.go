// Package slurmtest starts a real one-node Slurm cluster on 127.0.0.1 for
// a test: a private munged (with a key of its own), slurmctld and slurmd
// from Debian's slurm-wlm, with a slurm.conf, free ports, and state, spool
// and log directories in the test's temporary directory, stopped when the
// test ends. Tests therefore never share a cluster, and never touch a Slurm
// the machine may run.
//
// It knows Slurm and munge, nothing of forkline. Without the commands
// (bash .ci/slurm-up.sh installs them), a test skips, or fails when
// FORKLINE_REQUIRE names slurm.
package slurmtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forkline/forkline/internal/testenv"
)

// Component is the FORKLINE_REQUIRE name of a Slurm cluster.
const Component = testenv.Slurm

// CPUs is what the node declares (slurmd's config_overrides lets a node
// declare more than the machine has): enough for four array elements of
// eight CPUs each, as the README's script asks, on a small machine. The
// elements share the real cores.
const CPUs = 32

// Cluster is a running one-node cluster.
type Cluster struct {
	Dir  string // its configuration, state and logs
	Conf string // slurm.conf; SLURM_CONF for the client commands
	t    testing.TB
	cmds []*exec.Cmd
}

var commands = []string{"sbatch", "scontrol", "squeue", "scancel", "sinfo", "sacct", "munged", "mungekey", "slurmctld", "slurmd"}

// lookPath finds a command on PATH or in the sbin directories Debian puts
// the daemons in.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("slurmtest: %s not found", name)
}

// Start starts a cluster for t and stops it when t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	testenv.Need(t, Component, func() error {
		for _, c := range commands {
			if c == "sacct" {
				continue // accounting is off; sacct is not needed
			}
			if _, err := lookPath(c); err != nil {
				return fmt.Errorf("%s is not installed", c)
			}
		}
		if os.Geteuid() != 0 {
			return errors.New("slurmd runs jobs as their user and must run as root")
		}
		return nil
	})
	// A short directory: munge's socket path must fit in a sockaddr_un.
	dir, err := os.MkdirTemp("", "fl-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), t: t}
	t.Cleanup(func() {
		c.stop()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("slurmtest: the cluster's logs are in %s", dir)
		}
	})
	for _, d := range []string{"munge", "state", "spool", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(dir, "munge", "munge.key")
	c.run("mungekey", "--create", "--keyfile="+key)
	socket := filepath.Join(dir, "munge", "socket")
	c.daemon("munged", "--foreground", "--force", "--socket="+socket, "--key-file="+key,
		"--log-file="+filepath.Join(dir, "log", "munged.log"), "--pid-file="+filepath.Join(dir, "munge", "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munge", "seed"))
	c.waitFor("munged's socket", func() bool { _, err := os.Stat(socket); return err == nil })

	ctld, node := freePort(t), freePort(t)
	conf := fmt.Sprintf(`ClusterName=forkline-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[3]s
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd.pid
SlurmctldLogFile=%[4]s/log/slurmctld.log
SlurmdLogFile=%[4]s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=15
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=%[5]d RealMemory=4096 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
`, ctld, node, socket, dir, CPUs)
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.daemon("slurmctld", "-D", "-i", "-f", c.Conf)
	c.daemon("slurmd", "-D", "-f", c.Conf, "-N", "localhost")
	c.waitFor("the node to be idle", func() bool {
		out, err := c.Command("sinfo", "-h", "-o", "%T").Output()
		return err == nil && strings.TrimSpace(string(out)) == "idle"
	})
	return c
}

// Command is a Slurm client command against this cluster (SLURM_CONF
// set), not started.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	p, err := lookPath(name)
	if err != nil {
		p = name
	}
	cmd := exec.Command(p, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	return cmd
}

// Run runs a client command and returns its output; a failure fails the
// test.
func (c *Cluster) Run(name string, args ...string) string {
	c.t.Helper()
	out, err := c.Command(name, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("slurmtest: %s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, c.Logs())
	}
	return strings.TrimSpace(string(out))
}

// State is the state of one job (an array element as JOBID_INDEX):
// PENDING, RUNNING, COMPLETED, CANCELLED, FAILED ...
func (c *Cluster) State(job string) string {
	out, err := c.Command("scontrol", "-o", "show", "job", job).Output()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if s, ok := strings.CutPrefix(f, "JobState="); ok {
			return s
		}
	}
	return ""
}

// WaitState waits up to timeout for job to be in one of the states.
func (c *Cluster) WaitState(job string, timeout time.Duration, states ...string) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := c.State(job)
		for _, want := range states {
			if s == want {
				return s
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("slurmtest: job %s is %s after %s, want %s\n%s", job, s, timeout, strings.Join(states, " or "), c.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Logs is the tail of the daemons' logs, for a failure message.
func (c *Cluster) Logs() string {
	var b bytes.Buffer
	for _, f := range []string{"slurmctld.log", "slurmd.log", "munged.log"} {
		data, _ := os.ReadFile(filepath.Join(c.Dir, "log", f))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s (tail)\n%s\n", f, data)
	}
	return b.String()
}

func (c *Cluster) run(name string, args ...string) {
	c.t.Helper()
	p, err := lookPath(name)
	if err != nil {
		c.t.Fatal(err)
	}
	if out, err := exec.Command(p, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("slurmtest: %s: %v\n%s", name, err, out)
	}
}

// daemon starts a daemon in the foreground as a child of the test, in its
// own process group, so that stop can end it and nothing it started.
func (c *Cluster) daemon(name string, args ...string) {
	c.t.Helper()
	p, err := lookPath(name)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(p, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	out, err := os.Create(filepath.Join(c.Dir, "log", name+".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("slurmtest: starting %s: %v", name, err)
	}
	c.cmds = append(c.cmds, cmd)
}

func (c *Cluster) waitFor(what string, ok func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			c.t.Fatalf("slurmtest: waited 30s for %s\n%s", what, c.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop cancels every job, asks slurmctld and slurmd to shut down, then
// ends the daemons this cluster started (SIGTERM, then SIGKILL) and waits
// for them.
func (c *Cluster) stop() {
	if len(c.cmds) > 1 {
		// Best effort: the daemons are ended below either way.
		c.Command("scancel", "--user=root").Run()
		time.Sleep(500 * time.Millisecond)
		c.Command("scontrol", "shutdown").Run()
	}
	for i := len(c.cmds) - 1; i >= 0; i-- {
		cmd := c.cmds[i]
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
