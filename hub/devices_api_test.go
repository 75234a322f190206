package hub

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"edgeflow/hub/hubapi"
	"edgeflow/hub/hublog"
	"edgeflow/wire/wirepb"
)

// addDevices puts devices into the hub's registry as a status message
// would, in a shuffled order so the API has to sort them.
func addDevices(t *testing.T, s *Server, ids []string) {
	t.Helper()
	shuffled := slices.Clone(ids)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	now := time.Now().UnixNano()
	for i, id := range shuffled {
		e := &hublog.Entry{Kind: hublog.KindStatus, Device: id, ServerTimeNs: now + int64(i)}
		s.reg.ApplyStatus(e, &wirepb.Status{Online: i%2 == 0, TimeNs: now, Version: "v" + id})
	}
}

// apiGet fetches path from the hub's HTTP listener and returns the
// status, the Content-Type and the body.
func apiGet(t *testing.T, s *Server, path string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// TestDevicesAPIParamErrors checks that every bad parameter of the device
// endpoints is a 400 whose JSON body names the parameter and says why.
func TestDevicesAPIParamErrors(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	addDevices(t, s, []string{"pump-1", "pump-2"})
	long := strings.Repeat("x", 129)
	tests := []struct {
		path, param string
	}{
		{"/v1/devices?limit=0", "limit"},
		{"/v1/devices?limit=-1", "limit"},
		{"/v1/devices?limit=10001", "limit"},
		{"/v1/devices?limit=ten", "limit"},
		{"/v1/devices?limit=1.5", "limit"},
		{"/v1/devices?limit=1&limit=2", "limit"},
		{"/v1/devices?after=pump%201", "after"},
		{"/v1/devices?after=pump/1", "after"},
		{"/v1/devices?after=" + long, "after"},
		{"/v1/devices?after=pump-1&after=pump-2", "after"},
		{"/v1/devices?colour=red", "colour"},
		{"/v1/devices?limit=5&offset=5", "offset"},
		{"/v1/devices?%zz", "query"},
		{"/v1/devices/pump%201", "id"},
		{"/v1/devices/pump%2F1", "id"},
		{"/v1/devices/" + long, "id"},
		{"/v1/devices/pump-1?verbose=1", "verbose"},
		{"/v1/devices/nope?limit=1", "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, ctype, body := apiGet(t, s, tt.path)
			var e hubapi.APIError
			if err := json.Unmarshal(body, &e); err != nil || code != 400 || e.Param != tt.param || e.Error == "" {
				t.Fatalf("got %d %s; want 400 naming %q with a reason", code, body, tt.param)
			}
			if !strings.HasPrefix(ctype, "application/json") {
				t.Errorf("Content-Type %q, want application/json", ctype)
			}
		})
	}
}

// TestDevicesAPIPaging walks GET /v1/devices page by page and checks that
// every device comes exactly once, in id order, with next on every page
// but the last.
func TestDevicesAPIPaging(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	var ids []string
	for i := range 22 {
		ids = append(ids, fmt.Sprintf("dev-%02d", i))
	}
	ids = append(ids, "A.first", "dev_9", "z-last") // byte order, not numeric or case-folded
	addDevices(t, s, ids)
	slices.Sort(ids)

	for _, tt := range []struct {
		limit int
		pages []int // devices per page
	}{
		{10, []int{10, 10, 5}},
		{5, []int{5, 5, 5, 5, 5}}, // an exact multiple ends without an empty page
		{25, []int{25}},
		{1000, []int{25}},
	} {
		t.Run(fmt.Sprint("limit=", tt.limit), func(t *testing.T) {
			var got, sizes []string
			after := ""
			for page := 0; ; page++ {
				if page > len(ids) {
					t.Fatalf("no end after %d pages: %v", page, sizes)
				}
				q := url.Values{"limit": {fmt.Sprint(tt.limit)}}
				if after != "" {
					q.Set("after", after)
				}
				code, _, body := apiGet(t, s, "/v1/devices?"+q.Encode())
				var resp hubapi.DevicesResponse
				if err := json.Unmarshal(body, &resp); err != nil || code != 200 {
					t.Fatalf("page %d: %d %s", page, code, body)
				}
				sizes = append(sizes, fmt.Sprint(len(resp.Devices)))
				for _, d := range resp.Devices {
					got = append(got, d.ID)
				}
				if resp.Next == "" {
					break
				}
				if last := resp.Devices[len(resp.Devices)-1].ID; resp.Next != last {
					t.Fatalf("page %d: next %q, want its last id %q", page, resp.Next, last)
				}
				after = resp.Next
			}
			if !slices.Equal(got, ids) {
				t.Fatalf("walk gave %v\nwant %v", got, ids)
			}
			var want []string
			for _, n := range tt.pages {
				want = append(want, fmt.Sprint(n))
			}
			if !slices.Equal(sizes, want) {
				t.Fatalf("page sizes %v, want %v", sizes, want)
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		code, _, body := apiGet(t, s, "/v1/devices")
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(body, &resp); err != nil || code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if _, ok := resp["next"]; ok {
			t.Fatalf("next on the only page: %s", resp["next"])
		}
		var page hubapi.DevicesResponse
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(s.Devices())
		if got, _ := json.Marshal(page.Devices); string(got) != string(want) {
			t.Fatalf("default page differs from Server.Devices:\n%s\n%s", got, want)
		}
	})

	t.Run("after an absent id", func(t *testing.T) {
		code, _, body := apiGet(t, s, "/v1/devices?limit=3&after=dev-05x")
		var resp hubapi.DevicesResponse
		if err := json.Unmarshal(body, &resp); err != nil || code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var got []string
		for _, d := range resp.Devices {
			got = append(got, d.ID)
		}
		if want := []string{"dev-06", "dev-07", "dev-08"}; !slices.Equal(got, want) || resp.Next != "dev-08" {
			t.Fatalf("got %v next %q, want %v next dev-08", got, resp.Next, want)
		}
		d, _ := s.Device("dev-06")
		if got := resp.Devices[0]; got.Version != "vdev-06" || got.Version != d.Version || got.Status != d.Status || got.Status == "unknown" {
			t.Fatalf("page entry %+v, Device %+v", got, d)
		}
	})

	t.Run("after the last id", func(t *testing.T) {
		code, _, body := apiGet(t, s, "/v1/devices?after=z-last")
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(body, &resp); err != nil || code != 200 || len(resp) != 1 || string(resp["devices"]) != "[]" {
			t.Fatalf("%d %s, want 200 with an empty list and no next", code, body)
		}
	})
}

// TestDevicesAPIUnknownDevice checks GET /v1/devices/{id}: a known device
// is 200, an unknown one a 404 with a JSON error.
func TestDevicesAPIUnknownDevice(t *testing.T) {
	s := startHub(t, testOptions(t, t.TempDir()))
	addDevices(t, s, []string{"pump-1"})

	code, _, body := apiGet(t, s, "/v1/devices/pump-1")
	var d hubapi.DeviceInfo
	if err := json.Unmarshal(body, &d); err != nil || code != 200 || d.ID != "pump-1" || d.Status != "online" {
		t.Fatalf("known device: %d %s", code, body)
	}
	code, ctype, body := apiGet(t, s, "/v1/devices/pump-2")
	var e hubapi.APIError
	if err := json.Unmarshal(body, &e); err != nil || code != 404 || !strings.Contains(e.Error, "pump-2") {
		t.Fatalf("unknown device: %d %s; want 404 with a JSON error naming it", code, body)
	}
	if !strings.HasPrefix(ctype, "application/json") {
		t.Fatalf("Content-Type %q, want application/json", ctype)
	}
}

// openAPI is the part of docs/openapi.yaml these tests read.
type openAPI struct {
	Paths      map[string]map[string]openAPIOp `yaml:"paths"`
	Components struct {
		Schemas map[string]openAPISchema `yaml:"schemas"`
	} `yaml:"components"`
}

type openAPIOp struct {
	Parameters []struct {
		Name string `yaml:"name"`
		In   string `yaml:"in"`
	} `yaml:"parameters"`
	Responses map[string]struct {
		Ref     string `yaml:"$ref"`
		Content map[string]struct {
			Schema openAPISchema `yaml:"schema"`
		} `yaml:"content"`
	} `yaml:"responses"`
}

type openAPISchema struct {
	Ref        string                   `yaml:"$ref"`
	Properties map[string]openAPISchema `yaml:"properties"`
}

func readOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return doc
}

// routePattern maps an OpenAPI path to the ServeMux pattern serving it.
func routePattern(path string) string {
	if path == "/" {
		return "/{$}"
	}
	return path
}

// registeredGETs returns the literal GET patterns the package's non-test
// files register on a mux (mux.Handle or mux.HandleFunc).
func registeredGETs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("api/*.go") // the routes are registered in package api
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`mux\.Handle(?:Func)?\("GET (/[^"]*)"`)
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %v registered GET routes: has the registration changed shape?", out)
	}
	return out
}

// TestOpenAPIMatchesHandler checks that every path in docs/openapi.yaml is
// served by Handler() under that very pattern, and that every GET route
// package api registers is in docs/openapi.yaml.
func TestOpenAPIMatchesHandler(t *testing.T) {
	s := startHub(t, aggTestOptions(t, t.TempDir())) // with an engine: every route
	mux, ok := s.Handler().(*http.ServeMux)
	if !ok {
		t.Fatalf("Handler() is a %T, not a *http.ServeMux: teach this test its routes", s.Handler())
	}
	// served reports the pattern mux picks for GET path ("" if none).
	served := func(path string) string {
		concrete := strings.NewReplacer("{id}", "pump-1", "{$}", "").Replace(path)
		_, pattern := mux.Handler(httptest.NewRequest("GET", concrete, nil))
		return pattern
	}
	doc := readOpenAPI(t)
	// Attribute writes are the only other methods (docs/ATTRIBUTES.md).
	writes := map[string]string{"/v1/devices/{id}/attributes": "put", "/v1/attributes/bulk": "post"}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method != "get" && writes[path] != method {
				t.Errorf("openapi %s %s: the hub serves only GET", method, path)
			}
		}
		if _, ok := ops["get"]; !ok {
			continue
		}
		if got, want := served(routePattern(path)), "GET "+routePattern(path); got != want {
			t.Errorf("openapi path %s: Handler() serves it with %q, want %q", path, got, want)
		}
	}
	// The dashboard's assets are described under "/", not one by one.
	undocumented := map[string]bool{"/dashboard/": true}
	for _, p := range registeredGETs(t) {
		if got := served(p); got != "GET "+p {
			t.Errorf("registered GET %s: Handler() serves it with %q", p, got)
		}
		docPath := p
		if p == "/{$}" {
			docPath = "/"
		}
		if _, ok := doc.Paths[docPath]; !ok && !undocumented[p] {
			t.Errorf("GET %s is served but not in docs/openapi.yaml", p)
		}
	}
}

// jsonFields returns the JSON names of a struct's fields.
func jsonFields(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIDeviceSchemas checks that docs/openapi.yaml describes the
// device endpoints as served: the fields of DeviceInfo and its parts, the
// paging parameters, next, and the error answers.
func TestOpenAPIDeviceSchemas(t *testing.T) {
	doc := readOpenAPI(t)
	for name, v := range map[string]any{"DeviceInfo": hubapi.DeviceInfo{}, "ClockInfo": hubapi.ClockInfo{}, "Backlog": hubapi.Backlog{}, "BufferFill": hubapi.BufferFill{}, "StreamInfo": hubapi.StreamInfo{}, "Error": hubapi.APIError{}} {
		sch, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("components/schemas/%s is missing", name)
			continue
		}
		var got []string
		for k := range sch.Properties {
			got = append(got, k)
		}
		slices.Sort(got)
		if want := jsonFields(v); !slices.Equal(got, want) {
			t.Errorf("schema %s has %v, the Go type %v", name, got, want)
		}
	}

	list := doc.Paths["/v1/devices"]["get"]
	var params []string
	for _, p := range list.Parameters {
		params = append(params, p.In+":"+p.Name)
	}
	slices.Sort(params)
	if want := []string{"query:after", "query:limit"}; !slices.Equal(params, want) {
		t.Errorf("/v1/devices parameters %v, want %v", params, want)
	}
	body := list.Responses["200"].Content["application/json"].Schema
	for _, field := range jsonFields(hubapi.DevicesResponse{}) {
		if _, ok := body.Properties[field]; !ok {
			t.Errorf("/v1/devices 200 lacks %q", field)
		}
	}
	one := doc.Paths["/v1/devices/{id}"]["get"]
	if ref := one.Responses["200"].Content["application/json"].Schema.Ref; ref != "#/components/schemas/DeviceInfo" {
		t.Errorf("/v1/devices/{id} 200 schema %q, want DeviceInfo", ref)
	}
	if ref := one.Responses["404"].Content["application/json"].Schema.Ref; ref != "#/components/schemas/Error" {
		t.Errorf("/v1/devices/{id} 404 schema %q, want Error", ref)
	}
	for path, op := range map[string]openAPIOp{"/v1/devices": list, "/v1/devices/{id}": one} {
		if ref := op.Responses["400"].Ref; ref != "#/components/responses/BadParam" {
			t.Errorf("%s 400 is %q, want the BadParam response", path, ref)
		}
	}
}
