package engine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadCatalogFromPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "models.json")
	body := `{"version":1,"models":[{"id":"m","provider":"groq","family":"x","context_window":8192,"max_output_tokens":1,"input_price_per_mtok":0,"output_price_per_mtok":0,"capabilities":["chat"],"tier":3}]}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadCatalog(path)
	if err != nil || c.Len() != 1 {
		t.Fatalf("load: %v", err)
	}
	if _, err := loadCatalog(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Fatal("missing file loaded")
	}
}
