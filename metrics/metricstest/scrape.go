// Package metricstest scrapes a /metrics endpoint and reads it with the
// Prometheus project's own text-format parser (prometheus/common/expfmt),
// not with forkline's code, and reads the list of documented series from
// docs/metrics.md, for tests.
package metricstest

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one scrape: the metric families by name.
type Scrape map[string]*dto.MetricFamily

// Get scrapes url as Prometheus does (text format) and parses it.
func Get(url string) (Scrape, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metricstest: GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metricstest: parsing %s: %w", url, err)
	}
	return fams, nil
}

// Value is the value of the series name whose labels include want: a
// counter's, a gauge's, or a histogram's or summary's count (name_count)
// or sum (name_sum). Several series matching are added up; ok is false
// when none does.
func (s Scrape) Value(name string, want map[string]string) (v float64, ok bool) {
	base, part := name, ""
	for _, suf := range []string{"_count", "_sum"} {
		if b, found := strings.CutSuffix(name, suf); found {
			if _, isFam := s[b]; isFam {
				base, part = b, suf
			}
		}
	}
	f := s[base]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if !hasLabels(m, want) {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil && part == "_count":
			v += float64(m.Histogram.GetSampleCount())
		case m.Histogram != nil && part == "_sum":
			v += m.Histogram.GetSampleSum()
		case m.Summary != nil && part == "_count":
			v += float64(m.Summary.GetSampleCount())
		case m.Summary != nil && part == "_sum":
			v += m.Summary.GetSampleSum()
		case m.Untyped != nil:
			v += m.Untyped.GetValue()
		}
	}
	return v, ok
}

// By returns the values of name by the value of one label (counters and
// gauges; histogram counts with name_count).
func (s Scrape) By(name, label string) map[string]float64 {
	out := map[string]float64{}
	base := strings.TrimSuffix(name, "_count")
	f := s[base]
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		key := ""
		for _, l := range m.Label {
			if l.GetName() == label {
				key = l.GetValue()
			}
		}
		switch {
		case m.Counter != nil:
			out[key] += m.Counter.GetValue()
		case m.Gauge != nil:
			out[key] += m.Gauge.GetValue()
		case m.Histogram != nil:
			out[key] += float64(m.Histogram.GetSampleCount())
		}
	}
	return out
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.Label {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

var documented = regexp.MustCompile("^\\| `(forkline_[a-z_]+)` \\| ([a-z]+)")

// Documented reads the series table of docs/metrics.md: name → type.
func Documented(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := documented.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = m[2]
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("metricstest: %s lists no forkline_ series", path)
	}
	return out, sc.Err()
}
