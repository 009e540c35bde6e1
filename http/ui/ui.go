// Package ui owns the dashboard: static assets embedded in the binary and served under /ui/. The page
// reads the same JSON API as every other client, with the token the user gives once per browser
// session; nothing is fetched from anywhere else.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard's files; mount it under /ui/ with the prefix stripped.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil { // the embedded tree always has the directory: this is a build defect, told plainly
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the dashboard's assets are missing from this build", http.StatusInternalServerError)
		})
	}
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page runs its own script only and talks to its own origin only.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
