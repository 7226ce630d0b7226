// Package reference renders the flags and metrics references of docs/reference from the code
// that declares them; golden tests in cmd/egressd and cmd/egressctl (internal/golden, -update
// regenerates) keep the committed files equal to what it renders, so they cannot go stale.
package reference

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"

	"github.com/egressd/egressd/internal/promdesc"
)

// Flags is a Markdown table of fs's flags, in their declaration order.
func Flags(fs *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | type | default | description |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Deprecated != "" {
			return // accepted for old command lines, documented where it moved
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := f.DefValue
		if def == "" || def == "[]" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, f.Value.Type(), def, cell(f.Usage))
	})
	return b.String()
}

// metric is one row of the metrics reference.
type metric struct {
	name, kind, help string
	labels           []string
}

// Metrics is a Markdown table of the metrics the collectors describe, by name.
func Metrics(collectors []prometheus.Collector) (string, error) {
	var ms []metric
	var errs []error
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m, err := parseDesc(d)
			if err == nil {
				m.kind, err = kindOf(c, d)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("collector %T: %w", c, err))
				continue
			}
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b metric) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(ms); i++ {
		if ms[i].name == ms[i-1].name {
			errs = append(errs, fmt.Errorf("metric %s is described twice", ms[i].name))
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	var b strings.Builder
	b.WriteString("| metric | type | labels | description |\n|---|---|---|---|\n")
	for _, m := range ms {
		labels := "—"
		if len(m.labels) > 0 {
			labels = "`" + strings.Join(m.labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.name, m.kind, labels, cell(m.help))
	}
	return b.String(), nil
}

// descString is prometheus.Desc.String(): the only way to read a descriptor's name, help and
// labels. A change of that format fails the reference tests, it cannot go unnoticed.
var descString = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}\}$`)

func parseDesc(d *prometheus.Desc) (metric, error) {
	sub := descString.FindStringSubmatch(d.String())
	if sub == nil {
		return metric{}, fmt.Errorf("descriptor %s: not in the format of prometheus.Desc.String", d)
	}
	name, err1 := strconv.Unquote(sub[1])
	help, err2 := strconv.Unquote(sub[2])
	if err := errors.Join(err1, err2); err != nil {
		return metric{}, fmt.Errorf("descriptor %s: %w", d, err)
	}
	m := metric{name: name, help: help}
	if sub[3] != "" {
		m.labels = strings.Split(sub[3], ",")
	}
	return m, nil
}

// kindOf is the type of the metric d of collector c: that of a client_golang metric or vector,
// or the type d was declared with (promdesc).
func kindOf(c prometheus.Collector, d *prometheus.Desc) (string, error) {
	switch c := c.(type) {
	case *prometheus.CounterVec:
		return "counter", nil
	case *prometheus.GaugeVec:
		return "gauge", nil
	case *prometheus.HistogramVec:
		return "histogram", nil
	case *prometheus.SummaryVec:
		return "summary", nil
	case prometheus.Metric:
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			return "", err
		}
		switch {
		case m.Counter != nil:
			return "counter", nil
		case m.Gauge != nil:
			return "gauge", nil
		case m.Histogram != nil:
			return "histogram", nil
		case m.Summary != nil:
			return "summary", nil
		}
	}
	switch t, ok := promdesc.TypeOf(d); {
	case !ok:
		return "", fmt.Errorf("metric %s: type unknown: declare it with promdesc.New", d)
	case t == prometheus.CounterValue:
		return "counter", nil
	case t == prometheus.GaugeValue:
		return "gauge", nil
	}
	return "untyped", nil
}

// cell is text fit for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
