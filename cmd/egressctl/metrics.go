package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Names of the agent's metrics egressctl reads, from nodeagent.Metrics (egressctl stays clear
// of the agent's Kubernetes dependencies; a test checks that both agree).
const (
	metricSteeredPaths  = "egressd_steered_path_pod_addresses"
	metricBuildInfo     = "egressd_build_info"
	metricObjects       = "egressd_objects"
	metricObjectFailure = "egressd_object_failure"
	metricSyncErrors    = "egressd_sync_errors_total"
)

// errNoMetrics: --metrics-address 0 asked not to read the agent's metrics.
var errNoMetrics = errors.New("not read (--metrics-address 0)")

// scrape reads the metrics of the agent serving them on address (host:port; "0": none).
// tokenFile is the ServiceAccount token sent with a scrape when it exists: the agent's own,
// inside its pod (the agent guards /metrics, --metrics-auth).
var tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

func scrape(ctx context.Context, address string) (map[string]*dto.MetricFamily, error) {
	if address == "0" {
		return nil, errNoMetrics
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := "http://" + address + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics address %q: %w", address, err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	if token, err := os.ReadFile(tokenFile); err == nil {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return nil, fmt.Errorf("GET %s: %s: the agent serves its metrics to a ServiceAccount allowed to get /metrics: run egressctl in the agent's pod (its token, %s, is sent)", url, resp.Status, tokenFile)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return families, nil
}

// pathOf is the object whose steering path a mark selects.
type pathOf struct {
	Kind   string `json:"kind"`
	Object string `json:"object"`
}

func (p pathOf) String() string { return p.Kind + " " + p.Object }

// sample is one series of a gauge, counter or untyped metric.
type sample struct {
	labels map[string]string
	value  float64
}

// samples are the series of the metric name.
func samples(families map[string]*dto.MetricFamily, name string) []sample {
	var out []sample
	for _, m := range families[name].GetMetric() {
		s := sample{labels: map[string]string{}}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Gauge != nil:
			s.value = m.GetGauge().GetValue()
		case m.Counter != nil:
			s.value = m.GetCounter().GetValue()
		default:
			s.value = m.GetUntyped().GetValue()
		}
		out = append(out, s)
	}
	return out
}

// steeredPaths are the objects of the steering marks, from the agent's metrics.
func steeredPaths(families map[string]*dto.MetricFamily) map[uint32]pathOf {
	out := map[uint32]pathOf{}
	for _, s := range samples(families, metricSteeredPaths) {
		if mark, err := strconv.ParseUint(s.labels["mark"], 0, 32); err == nil {
			out[uint32(mark)] = pathOf{s.labels["kind"], s.labels["object"]}
		}
	}
	return out
}
