package main

// Checks of the deploy/ directory (README.md, "Deploying"): the systemd unit
// (systemd-analyze verify and the unit's contract with serve), the
// Prometheus alert rules (promtool check rules and promtool test rules) and
// the Grafana dashboard (structure, and every query through promtool's
// PromQL parser). deploy_metrics_test.go checks that a live member serves
// every metric they reference.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// deployPath is the path of a file under the repository's deploy/ directory.
func deployPath(rel string) string {
	return filepath.Join("..", "..", "deploy", filepath.FromSlash(rel))
}

// readDeploy reads deploy/rel or fails the test naming it.
func readDeploy(tb testing.TB, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(deployPath(rel))
	if err != nil {
		tb.Fatalf("deploy/%s: %v", rel, err)
	}
	return b
}

// unitFile is a parsed systemd unit: section -> key -> values in order.
type unitFile map[string]map[string][]string

// parseUnit parses systemd's unit syntax (no line continuations: the unit
// has none).
func parseUnit(b []byte) (unitFile, error) {
	u := unitFile{}
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		case section == "":
			return nil, fmt.Errorf("line %d: %q before any [section]", i+1, line)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not key=value", i+1, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u, nil
}

// get is the last value of section.key ("" when unset).
func (u unitFile) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// envFileValue is the value of the active (uncommented) assignment of name
// in an EnvironmentFile, "" when there is none.
func envFileValue(b []byte, name string) string {
	v := ""
	for _, line := range strings.Split(string(b), "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == name {
			v = val
		}
	}
	return v
}

// TestDeploySystemdUnit checks deploy/systemd/consumerd.service: its
// contract with `consumerd serve` (a dedicated user, the data directory in
// its StateDirectory, SIGTERM with a stop timeout longer than the drain's
// --shutdown-timeout, restart on failure, a high file limit), then
// `systemd-analyze verify` on a copy whose ExecStart and EnvironmentFile
// exist, which must print nothing about the unit; a broken copy proves
// that verify reads it.
func TestDeploySystemdUnit(t *testing.T) {
	unit := readDeploy(t, "systemd/consumerd.service")
	env := readDeploy(t, "systemd/consumerd.env")
	u, err := parseUnit(unit)
	if err != nil {
		t.Fatalf("deploy/systemd/consumerd.service: %v", err)
	}
	exec0 := strings.Fields(u.get("Service", "ExecStart"))
	if len(exec0) != 2 || exec0[1] != "serve" || !filepath.IsAbs(exec0[0]) {
		t.Errorf("ExecStart=%q, want an absolute path to consumerd and serve (flags come from the environment file)", u.get("Service", "ExecStart"))
	}
	for key, want := range map[string]string{"Restart": "on-failure", "KillSignal": "SIGTERM", "StateDirectory": "consumerd"} {
		if got := u.get("Service", key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	if typ := u.get("Service", "Type"); typ != "simple" && typ != "exec" {
		t.Errorf("Type=%q, want simple or exec (serve does not notify systemd)", typ)
	}
	if user := u.get("Service", "User"); user == "" || user == "root" {
		t.Errorf("User=%q, want a dedicated user", user)
	}
	if u.get("Service", "RestartSec") == "" || u.get("Service", "EnvironmentFile") == "" {
		t.Errorf("RestartSec=%q EnvironmentFile=%q: both must be set", u.get("Service", "RestartSec"), u.get("Service", "EnvironmentFile"))
	}
	if !contains(u["Service"]["Environment"], "CONSUMERD_DATA_DIR=%S/consumerd") {
		t.Errorf("Environment=%q lacks CONSUMERD_DATA_DIR=%%S/consumerd (the StateDirectory)", u["Service"]["Environment"])
	}
	if n, err := strconv.Atoi(u.get("Service", "LimitNOFILE")); err != nil || n < 65536 {
		t.Errorf("LimitNOFILE=%q, want at least 65536 (RocksDB holds several descriptors per shard replica)", u.get("Service", "LimitNOFILE"))
	}
	stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", u.get("Service", "TimeoutStopSec"), err)
	}
	drain := 60 * time.Second // serve's --shutdown-timeout default
	if v := envFileValue(env, "CONSUMERD_SHUTDOWN_TIMEOUT"); v != "" {
		if drain, err = time.ParseDuration(v); err != nil {
			t.Fatalf("deploy/systemd/consumerd.env: CONSUMERD_SHUTDOWN_TIMEOUT=%q: %v", v, err)
		}
	}
	if stop < drain+10*time.Second {
		t.Errorf("TimeoutStopSec=%s must exceed the drain's --shutdown-timeout %s by 10s at least, or systemd SIGKILLs a draining member", stop, drain)
	}

	analyze := findBinary(t, "systemd-analyze")
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skipf("no `true` binary for ExecStart: %v", err)
	}
	dir := t.TempDir()
	envPath := filepath.Join(dir, "consumerd.env")
	if err := os.WriteFile(envPath, env, 0o640); err != nil {
		t.Fatal(err)
	}
	verify := func(name string, text string) string {
		text = strings.Replace(text, "ExecStart="+exec0[0], "ExecStart="+truePath, 1)
		text = strings.Replace(text, "EnvironmentFile="+u.get("Service", "EnvironmentFile"), "EnvironmentFile="+envPath, 1)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		var ours []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(line, name) {
				ours = append(ours, line)
			} else if line != "" {
				t.Logf("systemd-analyze verify (not about %s): %s", name, line)
			}
		}
		if err != nil && len(ours) == 0 {
			ours = append(ours, fmt.Sprintf("exit: %v: %s", err, out))
		}
		return strings.Join(ours, "\n")
	}
	if out := verify("consumerd.service", string(unit)); out != "" {
		t.Errorf("systemd-analyze verify deploy/systemd/consumerd.service:\n%s", out)
	}
	broken := strings.Replace(string(unit), "Restart=on-failure", "Restart=sometimes", 1)
	if out := verify("broken-consumerd.service", broken); !strings.Contains(out, "sometimes") {
		t.Errorf("systemd-analyze verify said nothing of a unit with Restart=sometimes (%q): the check would miss errors", out)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ruleFile mirrors a Prometheus rule file (and a promtool test file).
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string            `json:"alertname"`
			ExpAlerts []json.RawMessage `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func loadRules(tb testing.TB, rel string) ruleFile {
	tb.Helper()
	var rf ruleFile
	if err := yaml.Unmarshal(readDeploy(tb, rel), &rf); err != nil {
		tb.Fatalf("deploy/%s: %v", rel, err)
	}
	return rf
}

// TestDeployAlertRules checks deploy/prometheus/consumerd-alerts.yml: every
// alert has a severity, a summary and a description, and fires in at least
// one case of the promtool unit tests; `promtool check rules` is clean and
// `promtool test rules` passes.
func TestDeployAlertRules(t *testing.T) {
	rules := loadRules(t, "prometheus/consumerd-alerts.yml")
	tests := loadRules(t, "prometheus/tests/consumerd-alerts_test.yml")
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if r.Labels["severity"] != "critical" && r.Labels["severity"] != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: needs a summary and a description", r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("alert %s never fires in deploy/prometheus/tests/consumerd-alerts_test.yml: add a case", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("deploy/prometheus/consumerd-alerts.yml has no alerts")
	}
	promtool := findBinary(t, "promtool")
	files, err := filepath.Glob(deployPath("prometheus/*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/prometheus/*.yml: %v %v", files, err)
	}
	if out, err := exec.Command(promtool, append([]string{"check", "rules"}, files...)...).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules %s: %v\n%s", strings.Join(files, " "), err, out)
	}
	if out, err := exec.Command(promtool, "test", "rules", deployPath("prometheus/tests/consumerd-alerts_test.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// dashboard mirrors what the tests read of a Grafana dashboard.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Query      json.RawMessage `json:"query"`
			Datasource *dashDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

type dashDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *dashDatasource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Datasource *dashDatasource `json:"datasource"`
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"` // a collapsed row's
}

// allPanels is every panel of d, rows' nested panels included.
func (d dashboard) allPanels() []dashPanel {
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func loadDashboard(tb testing.TB) dashboard {
	tb.Helper()
	var d dashboard
	if err := json.Unmarshal(readDeploy(tb, "grafana/consumerd.json"), &d); err != nil {
		tb.Fatalf("deploy/grafana/consumerd.json: %v", err)
	}
	return d
}

// TestDeployDashboard checks deploy/grafana/consumerd.json: a ${datasource}
// variable of type datasource (Prometheus) that every panel and query uses,
// unique panel ids, panels inside the 24-column grid, a query in every
// panel that is not a row, and every query valid PromQL for promtool (with
// Grafana's variables substituted).
func TestDeployDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want 36 or newer (datasource references by uid)", d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error(`no templating variable {"type": "datasource", "name": "datasource", "query": "prometheus"}`)
	}
	ids := map[int]string{}
	var exprs []string
	for _, p := range d.allPanels() {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %q (refId %q, datasource %+v): want an expr, a refId and datasource ${datasource}", p.Title, tg.Expr, tg.RefID, tg.Datasource)
			}
			exprs = append(exprs, fmt.Sprintf("    - record: dashboard_panel_%d_%s\n      expr: %s\n", p.ID, tg.RefID, strconv.Quote(grafanaToPromQL(tg.Expr))))
		}
	}

	promtool := findBinary(t, "promtool")
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, []byte("groups:\n  - name: dashboard\n    rules:\n"+strings.Join(exprs, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries (as recording rules dashboard_panel_<id>_<refId>) do not parse: promtool check rules: %v\n%s", err, out)
	}
}

// grafanaToPromQL replaces Grafana's variables in a panel query by values
// PromQL accepts: intervals by 5m, the others (label matchers) by ".+".
func grafanaToPromQL(expr string) string {
	r := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "5m", "$__range", "1h")
	return regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`).ReplaceAllString(r.Replace(expr), ".+")
}

var (
	// promqlStrings are PromQL string literals, which hold no metric names.
	promqlStrings = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlIdents  = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	consumerdName = regexp.MustCompile(`^consumerd_[a-z_]+$`)
)

// consumerdMetrics returns the consumerd_ metric names expr mentions, in
// order, without duplicates: every identifier outside string literals that
// matches ^consumerd_[a-z_]+$ (PromQL's own names and labels never do).
func consumerdMetrics(expr string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range promqlIdents.FindAllString(promqlStrings.ReplaceAllString(expr, `""`), -1) {
		if consumerdName.MatchString(id) && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// deployReferences maps every consumerd_ metric name the dashboard's queries
// and variables and the alert rules' expressions mention to where (sorted).
func deployReferences(tb testing.TB) map[string][]string {
	tb.Helper()
	refs := map[string][]string{}
	add := func(where, expr string) {
		for _, name := range consumerdMetrics(expr) {
			refs[name] = append(refs[name], where)
		}
	}
	d := loadDashboard(tb)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil {
			add(fmt.Sprintf("dashboard variable %s", v.Name), q.Query)
		}
	}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			add(fmt.Sprintf("dashboard panel %q", p.Title), tg.Expr)
		}
	}
	for _, g := range loadRules(tb, "prometheus/consumerd-alerts.yml").Groups {
		for _, r := range g.Rules {
			add("alert "+r.Alert+r.Record, r.Expr)
		}
	}
	for name := range refs {
		sort.Strings(refs[name])
	}
	return refs
}

// TestConsumerdMetrics checks the PromQL tokenizer that finds the metric
// names of the deploy/ queries.
func TestConsumerdMetrics(t *testing.T) {
	cases := []struct{ expr, want string }{
		{`histogram_quantile(0.99, sum by (le) (rate(consumerd_shard_txn_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
			"consumerd_shard_txn_duration_seconds_bucket"},
		{`time() - consumerd_snapshot_last_success_timestamp_seconds > 3600 and on (job, instance, shard) increase(consumerd_recoverylog_appended_bytes_total[1h]) > 0`,
			"consumerd_snapshot_last_success_timestamp_seconds consumerd_recoverylog_appended_bytes_total"},
		{`label_values(consumerd_build_info{job=~"$job"}, instance)`, "consumerd_build_info"},
		{`up{job="consumerd", note="consumerd_not_a_metric"} == 0`, ""},
		{`consumerd_a / consumerd_a + consumerd_shard_status{state='FAILED'}`, "consumerd_a consumerd_shard_status"},
		// A label name: the caller then finds it unserved and says so.
		{`sum by (consumerd_label) (x)`, "consumerd_label"},
	}
	for _, tc := range cases {
		if got := strings.Join(consumerdMetrics(tc.expr), " "); got != tc.want {
			t.Errorf("consumerdMetrics(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
	if got, want := grafanaToPromQL(`rate(x{job=~"$job", i=~"${instance}"}[$__rate_interval])`), `rate(x{job=~".+", i=~".+"}[5m])`; got != want {
		t.Errorf("grafanaToPromQL = %q, want %q", got, want)
	}
}
