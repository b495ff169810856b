package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestReleaseConfig reads .goreleaser.yaml as goreleaser does (task release-check runs
// goreleaser check itself, which needs the network once) and checks what a release
// promises: tallyd and tally for linux and darwin on amd64 and arm64, each with the tag's
// version linked in, and a multi-arch image whose Dockerfile copies the binaries built.
func TestReleaseConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version int `yaml:"version"`
		Builds  []struct {
			ID      string   `yaml:"id"`
			Main    string   `yaml:"main"`
			Binary  string   `yaml:"binary"`
			Env     []string `yaml:"env"`
			Goos    []string `yaml:"goos"`
			Goarch  []string `yaml:"goarch"`
			Ldflags []string `yaml:"ldflags"`
		} `yaml:"builds"`
		Archives []struct {
			IDs   []string `yaml:"ids"`
			Files []string `yaml:"files"`
		} `yaml:"archives"`
		Dockers []struct {
			IDs        []string `yaml:"ids"`
			Dockerfile string   `yaml:"dockerfile"`
			Images     []string `yaml:"images"`
			Tags       []string `yaml:"tags"`
			Platforms  []string `yaml:"platforms"`
		} `yaml:"dockers_v2"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(false)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Version != 2 {
		t.Errorf("version %d, want 2 (goreleaser v2)", cfg.Version)
	}
	built := map[string]bool{}
	for _, b := range cfg.Builds {
		built[b.ID] = true
		if fi, err := os.Stat(filepath.Join("..", b.Main)); err != nil || !fi.IsDir() {
			t.Errorf("build %s: main %s is no package (%v)", b.ID, b.Main, err)
		}
		if !slices.Contains(b.Env, "CGO_ENABLED=0") {
			t.Errorf("build %s is not static (CGO_ENABLED=0)", b.ID)
		}
		if b.ID == "probe" {
			continue
		}
		if !slices.Equal(b.Goos, []string{"linux", "darwin"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) {
			t.Errorf("build %s for %v %v, want linux and darwin, amd64 and arm64", b.ID, b.Goos, b.Goarch)
		}
		if !strings.Contains(strings.Join(b.Ldflags, " "), "-X github.com/tally-dev/tally/pipeline/buildinfo.version={{ .Tag }}") {
			t.Errorf("build %s does not link the version in: %v", b.ID, b.Ldflags)
		}
	}
	for _, id := range []string{"tallyd", "tally", "probe"} {
		if !built[id] {
			t.Errorf("no build %s", id)
		}
	}
	for _, a := range cfg.Archives {
		for _, f := range a.Files {
			if m, _ := filepath.Glob(filepath.Join("..", f)); len(m) == 0 {
				t.Errorf("archive file %s matches nothing", f)
			}
		}
	}
	if len(cfg.Dockers) != 1 {
		t.Fatalf("%d images, want 1", len(cfg.Dockers))
	}
	d := cfg.Dockers[0]
	if !slices.Equal(d.Platforms, []string{"linux/amd64", "linux/arm64"}) || len(d.Images) == 0 || !slices.Contains(d.Tags, "{{ .Tag }}") {
		t.Errorf("image %v tags %v for %v, want linux/amd64 and linux/arm64 tagged with the tag", d.Images, d.Tags, d.Platforms)
	}
	docker, err := os.ReadFile(filepath.Join("..", d.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range d.IDs {
		if !built[id] || !strings.Contains(string(docker), "${TARGETPLATFORM}/"+id) {
			t.Errorf("the image's Dockerfile does not copy build %s from ${TARGETPLATFORM}/", id)
		}
	}
	task, err := os.ReadFile(filepath.Join("..", "Taskfile.yml"))
	if err != nil || !strings.Contains(string(task), "go run github.com/goreleaser/goreleaser/v2@v2.15.1 check") {
		t.Errorf("Taskfile.yml has no release-check running goreleaser check (%v)", err)
	}
}
