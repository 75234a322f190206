package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"edgeflow/demo"
	"edgeflow/hub"
	"edgeflow/hub/hubapi"
	"edgeflow/hub/rules"
	"edgeflow/simulator"
	"edgeflow/wire"
	"edgeflow/wire/wirepb"
)

// Environment of TestDashboardInBrowser.
const (
	// envChromium names the browser binary (default: chromium,
	// chromium-browser or google-chrome on PATH).
	envChromium = "EDGEFLOW_CHROMIUM"
	// envScreenshots is a directory to keep the screenshots in (default:
	// the test's artifact directory, kept with go test -artifacts).
	envScreenshots = "EDGEFLOW_SCREENSHOT_DIR"
	// envUpdateDocs=1 also writes the screenshots to docs/.
	envUpdateDocs = "EDGEFLOW_UPDATE_DOCS_SCREENSHOT"
	// envURL is a running hub's dashboard for TestDashboardScreenshot,
	// e.g. http://127.0.0.1:8080/ of `hubd --demo`.
	envURL = "EDGEFLOW_DASHBOARD_URL"
)

// findChromium returns the browser to drive, or "" if there is none.
func findChromium() string {
	if p := os.Getenv(envChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// shownDevice is a row of the dashboard's fleet table.
type shownDevice struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Events uint64 `json:"events"`
	Gaps   uint64 `json:"gaps"`
	// Fill is the buffer fill the row shows, -1 for none.
	Fill float64 `json:"fill"`
}

// shownWindow is a bar of the dashboard's chart.
type shownWindow struct {
	StartMs  int64  `json:"start_ms"`
	Count    uint64 `json:"count"`
	Final    bool   `json:"final"`
	Revision uint64 `json:"revision"`
}

// shown is what the page displays, read from its DOM.
type shown struct {
	Devices   []shownDevice `json:"devices"`
	Query     string        `json:"query"`
	Window    string        `json:"window"`
	Bars      []shownWindow `json:"bars"`
	Overflows bool          `json:"overflows"`
}

const readPage = `(() => {
  const rows = [...document.querySelectorAll('#devices tbody tr[data-device]')].map((tr) => ({
    id: tr.dataset.device, status: tr.dataset.status, events: +tr.dataset.events, gaps: +tr.dataset.gaps,
    fill: tr.dataset.fill === '' ? -1 : +tr.dataset.fill }));
  const chart = document.getElementById('chart');
  const bars = [...chart.querySelectorAll('rect[data-start-ms]')].map((r) => ({
    start_ms: +r.dataset.startMs, count: +r.dataset.count, final: r.dataset.final === 'true', revision: +r.dataset.revision }));
  return { devices: rows, query: chart.dataset.query || '', window: chart.dataset.window || '', bars,
    overflows: document.documentElement.scrollWidth > window.innerWidth + 1 };
})()`

// TestDashboardInBrowser runs a hub fed by a small simulated fleet (one
// device on a flaky link), loads the dashboard in headless Chromium, and
// checks that the fleet table and the window chart show what the API
// returns; it saves screenshots at desktop and phone sizes.
func TestDashboardInBrowser(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skipf("chromium not found: install Debian's chromium (scripts/browser-test.sh does) or set %s", envChromium)
	}
	if testing.Short() {
		t.Skip("runs a simulated fleet and a browser")
	}
	d := startDemo(t)
	base := "http://" + d.Hub.HTTPAddr()
	if _, err := d.Report(); err != nil { // the fleet has run and drained: the data stands still
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ctx = newBrowser(t, ctx, browser)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+"/?range=300000&alerts_poll_ms="+alertsPollMs)); err != nil {
		t.Fatalf("load the dashboard: %v", err)
	}
	// Wait until the page has drawn the table and the chart.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('#devices tbody tr[data-device]').length >= 6 &&
		document.querySelectorAll('#chart rect[data-start-ms]').length > 0`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the dashboard did not show the fleet and the chart: %v", err)
	}
	var page shown
	var mismatch error
	for range 5 { // windows turn final as the watermark moves: retry a moving read
		if page, mismatch = comparePage(ctx, base); mismatch == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if mismatch != nil {
		t.Fatal(mismatch)
	}
	t.Logf("%d devices and %d windows of %s match the API", len(page.Devices), len(page.Bars), page.Window)
	checkAlertsPanel(t, ctx, d, base)
	_ = chromedp.Do(ctx, chromedp.Sleep(2500*time.Millisecond)) // a second /metrics sample draws the ingest rate
	saveScreenshot(t, ctx, "dashboard.png")

	// A phone: the page must fit the width (tables scroll inside their panel).
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Sleep(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	phone, err := chromedp.Run(ctx, chromedp.Evaluate[shown](readPage))
	if err != nil {
		t.Fatal(err)
	}
	if phone.Overflows {
		t.Error("at 390 px wide the page is wider than the screen")
	}
	saveScreenshot(t, ctx, "dashboard-phone.png")
}

// TestDashboardWithReadToken runs the hub with a read token: the page
// loads without it, says it needs one, and once the token is typed into
// its field (kept in sessionStorage, sent as a bearer token) shows the
// fleet, the chart and the live stream.
func TestDashboardWithReadToken(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skipf("chromium not found: install Debian's chromium (scripts/browser-test.sh does) or set %s", envChromium)
	}
	if testing.Short() {
		t.Skip("runs a simulated fleet and a browser")
	}
	const token = "dashboard-test-token-42"
	d := startDemoWith(t, token)
	base := "http://" + d.Hub.HTTPAddr()
	if _, err := d.Report(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ctx = newBrowser(t, ctx, browser)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(base+"/?range=300000")); err != nil {
		t.Fatalf("load the dashboard: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('token-note').textContent.includes('needs a read token')`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the page did not ask for the token: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token", token), chromedp.Click("#token-form button")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('#devices tbody tr[data-device]').length >= 6 &&
		document.querySelectorAll('#chart rect[data-start-ms]').length > 0 &&
		document.getElementById('conn').textContent === 'live' &&
		sessionStorage.getItem('edgeflow-read-token') !== null && !location.href.includes('dashboard-test-token')`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("with the token the dashboard did not show the fleet, the chart and the live stream: %v", err)
	}
	saveScreenshot(t, ctx, "dashboard-token.png")
}

// TestDashboardScreenshot takes the screenshots of a running hub's
// dashboard (EDGEFLOW_DASHBOARD_URL), e.g. docs/dashboard.png from
// `hubd --demo` a few minutes in, with EDGEFLOW_UPDATE_DOCS_SCREENSHOT=1.
func TestDashboardScreenshot(t *testing.T) {
	url := os.Getenv(envURL)
	browser := findChromium()
	if url == "" || browser == "" {
		t.Skipf("set %s to a hub's dashboard and have chromium installed", envURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = newBrowser(t, ctx, browser)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(url), chromedp.Sleep(7*time.Second)); err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, ctx, "dashboard.png")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Sleep(time.Second)); err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, ctx, "dashboard-phone.png")
}

// alertsPollMs makes the page read GET /v1/alerts once in the test's
// time, so an alert that appears or goes later came from /v1/stream.
const alertsPollMs = "3600000"

// testRules are the demo hub's rules in the browser tests: one that fires
// for every 10 s window with temp events (fleet-wide, provisional, so it
// fires in the short run) and a buffer rule the test drives with statuses.
const testRules = `
rules:
  - {name: temp-seen, metric: temp, window: "tumbling:10s", agg: count, op: ">=", value: 1, on: provisional}
  - {name: buffer-full, kind: buffer, fill_ratio: 0.9}
`

// shownAlert is a row of the dashboard's firing alerts, or an alert of
// GET /v1/alerts in the same form.
type shownAlert struct {
	ID       string  `json:"id"`
	Rule     string  `json:"rule"`
	Group    string  `json:"group"`
	Start    string  `json:"start"`
	End      string  `json:"end"`
	Value    float64 `json:"value"`
	Revision uint64  `json:"revision"`
}

const readAlerts = `[...document.querySelectorAll('#alerts tbody tr[data-id]')].map((tr) => ({
  id: tr.dataset.id, rule: tr.dataset.rule, group: tr.dataset.group, start: tr.dataset.start, end: tr.dataset.end,
  value: +tr.dataset.value, revision: +tr.dataset.revision }))`

// compareAlerts reads the alerts panel and GET /v1/alerts?state=firing
// and says where they differ.
func compareAlerts(ctx context.Context, base string) ([]shownAlert, error) {
	page, err := chromedp.Run(ctx, chromedp.Evaluate[[]shownAlert](readAlerts))
	if err != nil {
		return nil, err
	}
	var api struct {
		Alerts []shownAlert `json:"alerts"`
	}
	if err := getJSON(base+"/v1/alerts?state=firing&limit=10000", &api); err != nil {
		return nil, err
	}
	byID := func(a, b shownAlert) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(page, byID)
	slices.SortFunc(api.Alerts, byID)
	if len(api.Alerts) == 0 || !slices.Equal(page, api.Alerts) {
		return page, fmt.Errorf("alerts panel %+v\nthe API %+v", page, api.Alerts)
	}
	return page, nil
}

// checkAlertsPanel checks the firing alerts panel against the API, then
// drives the buffer rule with two statuses of a device on the hub's
// broker: its alert must appear in the panel and then leave it, which only
// the stream's alert events can do (the page reads the list once).
func checkAlertsPanel(t *testing.T, ctx context.Context, d *demo.Demo, base string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('#alerts tbody tr[data-id]').length > 0`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the dashboard shows no firing alert: %v", err)
	}
	var shown []shownAlert
	var mismatch error
	for range 5 { // provisional windows still move: retry a moving read
		if shown, mismatch = compareAlerts(ctx, base); mismatch == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if mismatch != nil {
		t.Fatal(mismatch)
	}
	t.Logf("%d firing alerts match the API", len(shown))

	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + d.Hub.BrokerAddr()).SetClientID("tank-1"))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to the hub's broker: %v", tok.Error())
	}
	defer c.Disconnect(0)
	status := func(used uint64) {
		t.Helper()
		b, err := wire.EncodeStatus(&wirepb.Status{DeviceId: "tank-1", Online: true,
			Buffer: &wirepb.BufferFill{CapacityBytes: 1000, UsedBytes: used}})
		if err != nil {
			t.Fatal(err)
		}
		if tok := c.Publish(wire.StatusTopic("tank-1"), 1, false, b); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish status: %v", tok.Error())
		}
	}
	const row = `document.querySelector('#alerts tbody tr[data-rule="buffer-full"][data-group="device=tank-1"]')`
	status(950)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](row+` !== null && `+row+`.dataset.value === '0.95' && `+row+`.dataset.revision === '1'`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the buffer alert did not appear in the panel from the stream: %v", err)
	}
	if _, err := compareAlerts(ctx, base); err != nil {
		t.Logf("panel and API after the buffer alert (the provisional windows may have moved): %v", err)
	}
	saveScreenshot(t, ctx, "dashboard-alerts.png")
	status(100)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](row+` === null`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the resolved buffer alert stayed in the panel: %v", err)
	}
}

// comparePage reads the page and the API and says where they differ.
func comparePage(ctx context.Context, base string) (shown, error) {
	page, err := chromedp.Run(ctx, chromedp.Evaluate[shown](readPage))
	if err != nil {
		return page, err
	}
	var devs hubapi.DevicesResponse
	if err := getJSON(base+"/v1/devices", &devs); err != nil {
		return page, err
	}
	if len(page.Devices) != len(devs.Devices) {
		return page, fmt.Errorf("table has %d devices, the API %d", len(page.Devices), len(devs.Devices))
	}
	for i, d := range devs.Devices {
		want := shownDevice{ID: d.ID, Status: d.Status, Fill: -1}
		if d.Buffer != nil {
			want.Fill = d.Buffer.Fill
		}
		for _, s := range d.Streams {
			want.Events += s.Events
			want.Gaps += s.GapEvents
		}
		if page.Devices[i] != want {
			return page, fmt.Errorf("table row %d: %+v, the API says %+v", i, page.Devices[i], want)
		}
	}
	if page.Query == "" {
		return page, fmt.Errorf("the chart has no data-query")
	}
	var agg hubapi.AggregatesResponse
	if err := getJSON(base+"/"+page.Query, &agg); err != nil {
		return page, err
	}
	if page.Window != agg.Window {
		return page, fmt.Errorf("chart window %q, the API %q", page.Window, agg.Window)
	}
	var want []shownWindow
	for _, w := range agg.Windows {
		if w.Avg != nil { // the chart draws avg by default
			want = append(want, shownWindow{StartMs: w.StartMs, Count: w.Count, Final: w.Final, Revision: w.Revision})
		}
	}
	slices.SortFunc(page.Bars, func(a, b shownWindow) int { return int(a.StartMs - b.StartMs) })
	if len(want) == 0 || !slices.Equal(page.Bars, want) {
		return page, fmt.Errorf("chart bars %+v\nthe API (%s) %+v", page.Bars, page.Query, want)
	}
	return page, nil
}

// startDemo runs the hub and a 6-device fleet for 12 s on free ports,
// one device (of the demo's flaky class) offline for 5 s of it.
func startDemo(t *testing.T) *demo.Demo { return startDemoWith(t, "") }

// startDemoWith is startDemo with a hub that requires readToken (if set).
func startDemoWith(t *testing.T, readToken string) *demo.Demo {
	t.Helper()
	sc := demo.Scenario(6, 12*time.Second)
	outage := simulator.Outage{At: 2 * time.Second, For: 5 * time.Second}
	sc.DrainTimeout = 30 * time.Second
	sc.Classes[3].Link = simulator.LinkSpec{Outages: []simulator.Outage{outage}}
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	rs, err := rules.ParseYAML([]byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	d, err := demo.Start(context.Background(), demo.Options{
		Hub: hub.Options{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", MQTTListen: "127.0.0.1:0", Logger: log, Registerer: reg, Gatherer: reg,
			HTTPReadToken: readToken, Rules: rs},
		Scenario: &sc, FleetDir: t.TempDir(), Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Errorf("stop the demo: %v", err)
		}
	})
	return d
}

// newBrowser starts headless Chromium with a fresh profile.
func newBrowser(t *testing.T, parent context.Context, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true), chromedp.Flag("metrics-recording-only", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// saveScreenshot writes a full-page PNG to the screenshot directory (and
// docs/ when asked).
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv(envScreenshots)
	if dir == "" {
		dir = t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if os.Getenv(envUpdateDocs) == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
