package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

// assets are the dashboard's files, served under /dashboard/ except
// index.html, which is the page at /.
//
//go:embed assets
var assets embed.FS

// Prefix is the path under which Handler serves the dashboard's assets.
const Prefix = "/dashboard/"

// Handler serves the dashboard: the page at "/" and its assets under
// Prefix. Any other path is a 404. Responses say no-cache so a browser
// revalidates after an upgrade of hubd instead of mixing old and new files.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		// Same-origin only: the page must work with no network but the hub's.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		switch {
		case r.URL.Path == "/":
			http.ServeFileFS(w, r, sub, "index.html")
		case len(r.URL.Path) > len(Prefix) && r.URL.Path[:len(Prefix)] == Prefix && r.URL.Path != Prefix+"index.html":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
