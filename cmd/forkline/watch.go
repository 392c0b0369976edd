package main

import (
	"github.com/forkline/forkline/internal/cli"
	"github.com/forkline/forkline/metrics"
	"github.com/forkline/forkline/observe"
	"github.com/forkline/forkline/progress"
)

// watchRun adds to *obs what watches a run besides its own progress: the
// Prometheus metrics served at addr (when given), and with JSON logs the
// progress as records (unless -quiet). The function it returns stops the
// metrics server; an address that cannot be served is bad input.
func watchRun(inv *cli.Invocation, addr string, obs *observe.Observer, command string) (stop func(), err error) {
	stop = func() {}
	var list observe.Multi
	if *obs != nil {
		list = append(list, *obs)
	}
	if addr != "" {
		m := metrics.New()
		srv, err := metrics.Serve(addr, m)
		if err != nil {
			return stop, err
		}
		// Said once the run has an id, so that the line carries it (a
		// run's id is known only once a resume has read it).
		url := "http://" + srv.Addr() + "/metrics"
		list = append(list, m, observe.Func(func(e observe.Event) {
			if r, ok := e.(observe.RunStarted); ok {
				inv.Logger().Info("serving metrics", "addr", srv.Addr(), "url", url, "run_id", r.RunID)
			}
		}))
		stop = func() { srv.Close() }
	}
	if inv.LogJSON() && !inv.Quiet {
		list = append(list, progress.New(nil, progress.Options{Command: command, Logger: inv.Logger()}))
	}
	if len(list) > 0 {
		*obs = list
	}
	return stop, nil
}
