package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// promAPI queries Prometheus's HTTP API.
type promAPI struct {
	base   string
	client *http.Client
}

// get calls path with params and decodes the data of a successful answer
// into out.
func (p promAPI) get(ctx context.Context, path string, params url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("prometheus %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("prometheus %s: read answer: %w", path, err)
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("prometheus %s: decode %q: %w", path, tail(string(body), 300), err)
	}
	if env.Status != "success" {
		return fmt.Errorf("prometheus %s %v: %s", path, params, env.Error)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("prometheus %s: decode data: %w", path, err)
	}
	return nil
}

// series is an instant or range query's result, values left raw.
type series struct {
	Metric map[string]string `json:"metric"`
}

type queryData struct {
	ResultType string   `json:"resultType"`
	Result     []series `json:"result"`
}

// query runs an instant query at ts.
func (p promAPI) query(ctx context.Context, expr string, ts time.Time) (queryData, error) {
	var d queryData
	err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(ts)}}, &d)
	return d, err
}

// queryRange runs a range query.
func (p promAPI) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (queryData, error) {
	var d queryData
	err := p.get(ctx, "/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)},
		"step": {fmt.Sprint(step.Seconds())}}, &d)
	return d, err
}

// labelValues asks for the values of label on the series selected.
func (p promAPI) labelValues(ctx context.Context, label, selector string, start, end time.Time) ([]string, error) {
	params := url.Values{"start": {unix(start)}, "end": {unix(end)}}
	if selector != "" {
		params.Set("match[]", selector)
	}
	var vs []string
	err := p.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", params, &vs)
	return vs, err
}

// ruleHealth lists the rules Prometheus failed to evaluate, and how many
// rules it loaded.
func (p promAPI) ruleHealth(ctx context.Context) (bad []string, loaded int, err error) {
	var d struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &d); err != nil {
		return nil, 0, err
	}
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			loaded++
			if r.Health == "err" {
				bad = append(bad, fmt.Sprintf("%s/%s: %s", g.Name, r.Name, r.LastError))
			}
		}
	}
	return bad, loaded, nil
}

// alertStates lists Prometheus's active alerts: "name{labels} state".
func (p promAPI) alertStates(ctx context.Context) ([]string, error) {
	var d struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", nil, &d); err != nil {
		return nil, err
	}
	var out []string
	for _, a := range d.Alerts {
		out = append(out, fmt.Sprintf("%s %s %s", KeyOf(a.Labels), a.State, labelString(a.Labels)))
	}
	sort.Strings(out)
	return out, nil
}

func unix(t time.Time) string { return fmt.Sprintf("%.3f", float64(t.UnixMilli())/1000) }

func labelString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// receiver is the Alertmanager webhook: it records when each alert first
// arrived firing.
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	first    map[AlertKey]time.Time
	labels   map[AlertKey]string
	messages int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{first: map[AlertKey]time.Time{}, labels: map[AlertKey]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	var msg struct {
		Alerts []struct {
			Status string            `json:"status"`
			Labels map[string]string `json:"labels"`
		} `json:"alerts"`
	}
	if err := json.NewDecoder(req.Body).Decode(&msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages++
	for _, a := range msg.Alerts {
		if a.Status != "firing" {
			continue
		}
		k := KeyOf(a.Labels)
		if _, ok := r.first[k]; !ok {
			r.first[k] = now
			r.labels[k] = labelString(a.Labels)
		}
	}
}

// received returns when each alert first arrived.
func (r *receiver) received() map[AlertKey]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[AlertKey]time.Time, len(r.first))
	for k, v := range r.first {
		out[k] = v
	}
	return out
}

// describe lists what arrived, for a failure message.
func (r *receiver) describe() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.first) == 0 {
		return fmt.Sprintf("nothing (%d webhook calls)", r.messages)
	}
	var lines []string
	for k, at := range r.first {
		lines = append(lines, fmt.Sprintf("  %s at %s %s", k, at.Format("15:04:05"), r.labels[k]))
	}
	sort.Strings(lines)
	return fmt.Sprintf("%d webhook calls:\n%s", r.messages, strings.Join(lines, "\n"))
}
