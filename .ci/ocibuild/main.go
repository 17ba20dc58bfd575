// Command ocibuild packs release binaries of the skiplock CLI into a
// container image without a container daemon or a registry: each binary
// becomes the one layer of an image built on an empty base (FROM scratch),
// run as the non-root user 65532:65532 with /skiplock as its entrypoint,
// and the images go into one multi-platform index written as an OCI image
// layout (push it with `crane push --index DIR REF`, copy it with
// `skopeo copy oci:DIR:TAG ...`). Optionally it also writes one platform's
// image as a tarball for `docker load` / `podman load`.
//
//	go run . -binary linux/amd64=../../dist/skiplock_linux_amd64_v1/skiplock \
//	         -binary linux/arm64=../../dist/skiplock_linux_arm64_v8.0/skiplock \
//	         -version v0.1.0 -revision $(git rev-parse HEAD) -created 2026-12-01T09:00:00Z \
//	         -tag ghcr.io/skiplock/skiplock:v0.1.0 -layout ../../dist/image
//
// It lives in a module of its own so that go-containerregistry stays out of
// skiplock's go.mod. See docs/releasing.md.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's "nonroot". No /etc/passwd entry
// is needed for a numeric user.
const nonRoot = 65532

// binaries collects repeated -binary os/arch=path flags.
type binaries []platformBinary

type platformBinary struct {
	platform v1.Platform
	path     string
}

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(s string) error {
	plat, path, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return fmt.Errorf("want os/arch=path, got %q", s)
	}
	p, err := v1.ParsePlatform(plat)
	if err != nil {
		return err
	}
	if p.OS == "" || p.Architecture == "" {
		return fmt.Errorf("want os/arch=path, got %q", s)
	}
	*b = append(*b, platformBinary{platform: *p, path: path})
	return nil
}

type options struct {
	binaries binaries
	layout   string
	tarball  string
	tag      string
	version  string
	revision string
	created  string
	source   string
	caCerts  string
}

func main() {
	var o options
	flag.Var(&o.binaries, "binary", "os/arch=path of a static skiplock binary (repeat for each platform)")
	flag.StringVar(&o.layout, "layout", "", "directory to write the OCI image layout to (replaced)")
	flag.StringVar(&o.tarball, "tarball", "", "also write the first platform's image here, for docker/podman load")
	flag.StringVar(&o.tag, "tag", "skiplock:dev", "image reference recorded in the layout and the tarball")
	flag.StringVar(&o.version, "version", "", "org.opencontainers.image.version label")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision label (the commit)")
	flag.StringVar(&o.created, "created", "", "image creation time, RFC 3339 (the commit's time keeps the image reproducible)")
	flag.StringVar(&o.source, "source", "https://github.com/skiplock/skiplock", "org.opencontainers.image.source label")
	flag.StringVar(&o.caCerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to ship for sslmode=verify-full (empty: none)")
	flag.Parse()
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

func build(o options) error {
	if len(o.binaries) == 0 || o.layout == "" {
		return errors.New("need at least one -binary and -layout")
	}
	ref, err := name.NewTag(o.tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	created := time.Unix(0, 0).UTC()
	if o.created != "" {
		if created, err = time.Parse(time.RFC3339, o.created); err != nil {
			return fmt.Errorf("-created: %w", err)
		}
	}
	var caCerts []byte
	if o.caCerts != "" {
		if caCerts, err = os.ReadFile(o.caCerts); err != nil {
			return fmt.Errorf("-ca-certs: %w", err)
		}
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "skiplock",
		"org.opencontainers.image.source":   o.source,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}
	for k, v := range labels {
		if v == "" {
			delete(labels, k)
		}
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var first v1.Image
	for _, b := range o.binaries {
		img, err := platformImage(b, caCerts, labels, created)
		if err != nil {
			return fmt.Errorf("%s: %w", b.platform, err)
		}
		if first == nil {
			first = img
		}
		p := b.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}

	if err := os.RemoveAll(o.layout); err != nil {
		return err
	}
	lp, err := layout.Write(o.layout, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
	})); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("ocibuild: %s (%d platforms) %s -> %s\n", ref, len(o.binaries), d, o.layout)

	if o.tarball != "" {
		if err := tarball.WriteToFile(o.tarball, ref, first); err != nil {
			return err
		}
		fmt.Printf("ocibuild: %s (%s) -> %s\n", ref, o.binaries[0].platform, o.tarball)
	}
	return nil
}

// platformImage is an empty image plus one layer holding the binary (and
// the CA bundle), configured to run it as a non-root user.
func platformImage(b platformBinary, caCerts []byte, labels map[string]string, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(b.path)
	if err != nil {
		return nil, err
	}
	files := []layerFile{{name: "skiplock", mode: 0o755, data: bin}}
	if caCerts != nil {
		files = append(files, layerFile{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caCerts})
	}
	layerTar, err := tarLayer(files, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "ocibuild: /skiplock", Created: v1.Time{Time: created}},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = b.platform.OS, b.platform.Architecture, b.platform.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config.User = fmt.Sprintf("%d:%d", nonRoot, nonRoot)
	cf.Config.Entrypoint = []string{"/skiplock"}
	cf.Config.Cmd = []string{"--help"}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = labels
	return mutate.ConfigFile(img, cf)
}

type layerFile struct {
	name string
	mode int64
	data []byte
}

// tarLayer writes files (and their parent directories) as a layer owned by
// root, with every timestamp set to created so the same inputs give the
// same digest.
func tarLayer(files []layerFile, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		parts := strings.Split(f.name, "/")
		for i := 1; i < len(parts); i++ {
			dir := strings.Join(parts[:i], "/") + "/"
			if dirs[dir] {
				continue
			}
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: created}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: created}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
