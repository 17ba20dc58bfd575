package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The same binaries, commit and time give the same image, byte for byte:
// a release can be rebuilt and checked against the published digest.
func TestBuildIsReproducibleAndRunsAsNonRoot(t *testing.T) {
	dir := t.TempDir()
	amd64 := filepath.Join(dir, "skiplock-amd64")
	arm64 := filepath.Join(dir, "skiplock-arm64")
	ca := filepath.Join(dir, "ca.crt")
	for path, body := range map[string]string{amd64: "amd64 binary", arm64: "arm64 binary", ca: "certs"} {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := func(out string) options {
		o := options{
			layout: out, tag: "skiplock:v0.1.0", version: "v0.1.0", revision: "0123abcd",
			created: "2026-12-01T09:00:00Z", source: "https://example.com/skiplock", caCerts: ca,
		}
		for _, s := range []string{"linux/amd64=" + amd64, "linux/arm64=" + arm64} {
			if err := o.binaries.Set(s); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	var digests []v1.Hash
	for _, out := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")} {
		if err := build(opts(out)); err != nil {
			t.Fatal(err)
		}
		idx, err := layout.ImageIndexFromPath(out)
		if err != nil {
			t.Fatal(err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v0.1.0" {
			t.Fatalf("layout index: %+v", m.Manifests)
		}
		digests = append(digests, m.Manifests[0].Digest)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of the same inputs: %s and %s", digests[0], digests[1])
	}

	lp, err := layout.FromPath(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	images, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	platforms, err := images.ImageIndex(digests[0])
	if err != nil {
		t.Fatal(err)
	}
	pm, err := platforms.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(pm.Manifests) != 2 {
		t.Fatalf("want 2 platforms, got %d", len(pm.Manifests))
	}
	for i, want := range []string{"amd64", "arm64"} {
		d := pm.Manifests[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != want {
			t.Fatalf("manifest %d platform: %+v", i, d.Platform)
		}
		img, err := platforms.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/skiplock" {
			t.Fatalf("config: user %q entrypoint %q", cf.Config.User, cf.Config.Entrypoint)
		}
		if cf.Architecture != want || cf.Config.Labels["org.opencontainers.image.revision"] != "0123abcd" {
			t.Fatalf("config: arch %q labels %v", cf.Architecture, cf.Config.Labels)
		}
		files := layerFiles(t, img)
		if files["skiplock"] != want+" binary" || files["etc/ssl/certs/ca-certificates.crt"] != "certs" {
			t.Fatalf("layer files: %v", files)
		}
	}
}

func TestBinaryFlag(t *testing.T) {
	var b binaries
	for _, bad := range []string{"linux/amd64", "linux/amd64=", "linux=path", "=path"} {
		if err := b.Set(bad); err == nil {
			t.Errorf("-binary %q: want an error", bad)
		}
	}
	if err := b.Set("linux/arm64/v8=bin"); err != nil {
		t.Fatal(err)
	}
	if got := b[0].platform; got.OS != "linux" || got.Architecture != "arm64" || got.Variant != "v8" || b[0].path != "bin" {
		t.Fatalf("parsed %+v", b[0])
	}
}

// layerFiles reads the image's one layer: regular files by name, and the
// binary's mode must be executable for the non-root user.
func layerFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("want one layer, got %d", len(layers))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Name == "skiplock" && h.Mode&0o005 != 0o005 {
			t.Fatalf("/skiplock mode %o: others cannot run it", h.Mode)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(body)
	}
	return files
}
