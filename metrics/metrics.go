// Package metrics is a run's Prometheus metrics: an observe.Observer that
// records the events the collector, the replayer (and an environment
// server) report, and the HTTP server behind -metrics-addr that exposes
// them with the Prometheus Go client. docs/metrics.md lists every series.
//
// It is the one place that knows the Prometheus client: the libraries
// that emit events know only package observe. Counters count what this
// process did (a resumed run's counters start at zero; the episodes it
// held before are the gauge forkline_run_episodes{state="kept_before"}).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/forkline/forkline/observe"
)

// Namespace prefixes every series forkline exports.
const Namespace = "forkline"

// latencyBuckets span a standby hand-off (microseconds) to a slow model
// turn or setup (minutes), in seconds.
var latencyBuckets = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics records a run's events into a registry of its own (with the Go
// runtime and process collectors). Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	runInfo        *prometheus.GaugeVec
	episodes       *prometheus.CounterVec
	notKept        *prometheus.CounterVec
	losses         *prometheus.CounterVec
	replayed       *prometheus.CounterVec
	steps          prometheus.Counter
	modelTurns     prometheus.Counter
	reward         prometheus.Summary
	rewardsMissing prometheus.Counter
	episodeSeconds prometheus.Histogram
	reset          *prometheus.HistogramVec
	policy         prometheus.Histogram
	tokens         *prometheus.CounterVec
	action         *prometheus.HistogramVec
	golden         *prometheus.HistogramVec
	goldenBuilding prometheus.Gauge
	shardBytes     prometheus.Counter
	generations    prometheus.Counter
	shardRows      prometheus.Counter

	mu      sync.Mutex
	live    func() observe.Live
	last    observe.Live // frozen at RunEnded
	planned map[string]float64
}

// New returns Metrics with every series registered.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), planned: map[string]float64{}}
	f := factory{m.reg}
	m.runInfo = f.gaugeVec("run_info", "The run this process works on (value 1), by command and run id.", "command", "run_id")
	m.episodes = f.counterVec("episodes_total", "Episodes kept in the dataset, by task and exit reason.", "task", "exit_reason")
	m.notKept = f.counterVec("episodes_not_kept_total", "Episodes ended and not kept (a service was unavailable, or cancelled before their first step), by task and exit reason.", "task", "exit_reason")
	m.losses = f.counterVec("scaffold_losses_total", "Episodes kept as scaffold losses (the policy or the environment failed, not the task), by task and exit reason.", "task", "exit_reason")
	m.replayed = f.counterVec("replay_episodes_total", "Replayed episodes by task and verdict (identical, diverged, error).", "task", "status")
	m.steps = f.counter("steps_total", "Steps recorded, counted as each one is.")
	m.modelTurns = f.counter("model_turns_total", "Steps a model answered.")
	m.reward = prometheus.NewSummary(prometheus.SummaryOpts{Namespace: Namespace, Name: "episode_reward",
		Help: "The verifier's episode-level reward of kept episodes (_sum and _count)."})
	m.reg.MustRegister(m.reward)
	m.rewardsMissing = f.counter("rewards_missing_total", "Episodes whose verifier ran and gave no value.")
	m.episodeSeconds = f.histogram("episode_seconds", "Wall time of kept episodes, from the rollout's start to its end.")
	m.reset = f.histogramVec("reset_seconds", "What an episode waited for its replica, by reset strategy (fork, recreate, fork+standby) and the provider's fork method.", "strategy", "method")
	m.policy = f.histogram("policy_seconds", "Time the policy took to decide one step (a model turn, for an LLM policy).")
	m.tokens = f.counterVec("policy_tokens_total", "Tokens the model server reported, by kind (prompt, completion).", "kind")
	m.action = f.histogramVec("action_seconds", "Time the environment took to act, by canonical action kind.", "kind")
	m.golden = f.histogramVec("golden_build_seconds", "Golden checkpoint builds (create, setup, checkpoint), by result (built, failed).", "result")
	m.goldenBuilding = f.gauge("golden_builds_in_progress", "Golden checkpoints being built right now.")
	m.shardBytes = f.counter("shard_bytes_total", "Bytes of the shard files of the generations closed (made durable).")
	m.generations = f.counter("shard_generations_total", "Shard generations closed and listed in the manifest.")
	m.shardRows = f.counter("shard_rows_total", "Rows of the generations closed, every table.")
	for _, st := range []string{"busy", "idle", "standby"} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "replicas",
			Help: "Replicas by state: busy (resetting or in an episode), idle, standby (prepared ahead).", ConstLabels: prometheus.Labels{"state": st}},
			func() float64 {
				l := m.snapshot()
				switch st {
				case "busy":
					return float64(l.Busy)
				case "idle":
					return float64(l.Idle())
				}
				return float64(l.Standby)
			}))
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "queue_depth",
		Help: "Episodes of this invocation not begun yet."}, func() float64 { return float64(m.snapshot().Queued) }))
	for _, st := range []string{"planned", "kept_before", "todo"} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "run_episodes",
			Help: "The run's plan: planned (of this part), kept_before (by the runs a resume continues), todo (this invocation).", ConstLabels: prometheus.Labels{"state": st}},
			func() float64 {
				m.mu.Lock()
				defer m.mu.Unlock()
				return m.planned[st]
			}))
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// factory registers series in the forkline namespace.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: latencyBuckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: latencyBuckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// Registry is where the series live (to add a command's own, or gather in
// a test).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) snapshot() observe.Live {
	m.mu.Lock()
	live := m.live
	last := m.last
	m.mu.Unlock()
	if live == nil {
		return last
	}
	return live()
}

// Observe records e.
func (m *Metrics) Observe(e observe.Event) {
	switch e := e.(type) {
	case observe.RunStarted:
		m.runInfo.WithLabelValues(e.Command, e.RunID).Set(1)
		m.mu.Lock()
		m.live = e.Live
		m.last = observe.Live{Replicas: e.Replicas, Queued: e.Todo}
		m.planned["planned"], m.planned["kept_before"], m.planned["todo"] = float64(e.Planned), float64(e.KeptBefore), float64(e.Todo)
		m.mu.Unlock()
	case observe.Golden:
		switch e.Phase {
		case observe.GoldenCreate:
			m.goldenBuilding.Inc()
		case observe.GoldenBuilt, observe.GoldenFailed:
			m.goldenBuilding.Dec()
			m.golden.WithLabelValues(string(e.Phase)).Observe(e.Took.Seconds())
		}
	case observe.Reset:
		m.reset.WithLabelValues(e.Strategy, e.Method).Observe(e.Took.Seconds())
	case observe.Step:
		m.steps.Inc()
		m.policy.Observe(e.Policy.Seconds())
		if e.ModelTurn {
			m.modelTurns.Inc()
		}
		if e.PromptTokens > 0 {
			m.tokens.WithLabelValues("prompt").Add(float64(e.PromptTokens))
		}
		if e.CompletionTokens > 0 {
			m.tokens.WithLabelValues("completion").Add(float64(e.CompletionTokens))
		}
		if e.Action != "" && e.Action != "done" {
			m.action.WithLabelValues(e.Action).Observe(e.Env.Seconds())
		}
	case observe.EpisodeEnded:
		if e.Status != "" {
			m.replayed.WithLabelValues(e.Task, e.Status).Inc()
		}
		if !e.Kept {
			m.notKept.WithLabelValues(e.Task, e.Exit).Inc()
			return
		}
		m.episodes.WithLabelValues(e.Task, e.Exit).Inc()
		if e.ScaffoldLoss {
			m.losses.WithLabelValues(e.Task, e.Exit).Inc()
		}
		if e.Reward != nil {
			m.reward.Observe(*e.Reward)
		}
		if e.RewardMissing {
			m.rewardsMissing.Inc()
		}
		m.episodeSeconds.Observe(e.Took.Seconds())
	case observe.Generation:
		m.generations.Inc()
		m.shardBytes.Add(float64(e.Bytes))
		m.shardRows.Add(float64(e.Rows))
	case observe.RunEnded:
		m.mu.Lock()
		if m.live != nil {
			// The pool is closed after the run: keep what it said last.
			m.last = m.live()
			m.last.Busy, m.last.Queued = 0, 0
		}
		m.live = nil
		m.mu.Unlock()
	}
}

// Handler serves the registry in the Prometheus text format (and
// OpenMetrics when the scraper asks for it).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Server is the HTTP server behind -metrics-addr.
type Server struct {
	srv  *http.Server
	addr string
	done chan error

	once     sync.Once
	closeErr error
}

// Serve listens on addr (HOST:PORT; port 0 picks a free one) and serves
// /metrics until Close. A bad or busy address fails here, before the run
// starts.
func Serve(addr string, m *Metrics) (*Server, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("metrics: -metrics-addr %q: want HOST:PORT, e.g. 127.0.0.1:9464 or :9464: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: -metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "forkline: metrics at /metrics")
	})
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on (with the port picked).
func (s *Server) Addr() string { return s.addr }

// Close stops serving, letting a scrape in progress finish (at most 5s).
// It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.closeErr = s.srv.Shutdown(ctx)
		if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && s.closeErr == nil {
			s.closeErr = serr
		}
	})
	return s.closeErr
}
