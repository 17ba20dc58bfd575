package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"
)

// A destination is where an export's files and its manifest live: a
// gocloud.dev/blob bucket, given as a URL, or a plain directory path.
//
//   - /path/to/dir (no scheme): a local directory, created if missing; the
//     same as file:///path/to/dir.
//   - file:///path/to/dir: a local directory (fileblob), created if missing.
//     Files are written beside their final name and synced before they are
//     renamed over it (no_tmp_dir: a rename never crosses file systems), and
//     without fileblob's .attrs sidecar files (metadata=skip), unless the
//     URL's query says otherwise.
//   - mem://NAME: an in-memory bucket of this process, the same bucket for
//     every use of NAME (tests).
//   - s3://bucket/prefix, gs://bucket/prefix, azblob://container/prefix and
//     any other scheme whose driver the program imports (the released skiplock
//     CLI imports s3blob; a library user imports the
//     drivers it needs): the URL's path is a key prefix (a "folder" in the
//     bucket); the query holds the driver's own parameters (region,
//     endpoint…). Credentials come from the driver's usual environment,
//     never from the URL.
//
// A blob write is atomic: a reader sees the whole object or the previous
// one, and a write cut short leaves nothing at its key.

// Destination is an open export destination.
type Destination struct {
	// Bucket holds the export's files and manifest.json at its root.
	Bucket *blob.Bucket
	// Name is the destination as given, without a password, for errors and
	// log lines.
	Name string
	// shared buckets (mem://NAME) outlive a Destination: Close leaves them
	// open.
	shared bool
}

// Close releases the bucket.
func (d *Destination) Close() error {
	if d == nil || d.shared {
		return nil
	}
	return d.Bucket.Close()
}

// memBuckets are this process's mem:// buckets, by name. It guards m.
var memBuckets struct {
	sync.Mutex
	m map[string]*blob.Bucket
}

// fileMux opens file:// URLs with the export's defaults: temporary files
// beside their final name, created directories, no sidecar files.
var fileMux = func() *blob.URLMux {
	m := new(blob.URLMux)
	m.RegisterBucket(fileblob.Scheme, &fileblob.URLOpener{Options: fileblob.Options{
		CreateDir: true, NoTempDir: true, Metadata: fileblob.MetadataDontWrite}})
	return m
}()

// schemeRe matches the start of a URL: a scheme, then "://".
var schemeRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// IsURL reports whether dest is a bucket URL (it starts with a scheme and
// "://") rather than a directory path.
func IsURL(dest string) bool { return schemeRe.MatchString(dest) }

// CheckDestination reports whether dest names a destination this program
// can open (a directory, or a URL whose scheme has a driver), without
// opening it. The error says what is wrong.
func CheckDestination(dest string) error {
	if dest == "" {
		return errors.New("empty: a directory or a bucket URL is required")
	}
	if !IsURL(dest) {
		return nil
	}
	u, err := url.Parse(dest)
	if err != nil {
		return errors.New("does not parse as a URL") // url's error quotes it, password and all
	}
	switch u.Scheme {
	case fileblob.Scheme, memblob.Scheme:
		return nil
	}
	if !blob.DefaultURLMux().ValidBucketScheme(u.Scheme) {
		return fmt.Errorf("scheme %q: no bucket driver for it in this program (it has %s; the released skiplock CLI has s3 (a CLI built with -tags skiplock_cloud); a Go program imports the driver, e.g. gocloud.dev/blob/s3blob)",
			u.Scheme, strings.Join(append([]string{fileblob.Scheme, memblob.Scheme}, blob.DefaultURLMux().BucketSchemes()...), ", "))
	}
	return nil
}

// Open opens the destination dest (a directory or a bucket URL; see
// Destination).
func Open(ctx context.Context, dest string) (*Destination, error) {
	if err := CheckDestination(dest); err != nil {
		return nil, fmt.Errorf("history: destination %s: %w", DisplayName(dest), err)
	}
	d := &Destination{Name: DisplayName(dest)}
	var err error
	if !IsURL(dest) {
		d.Bucket, err = fileblob.OpenBucket(dest, &fileblob.Options{CreateDir: true, NoTempDir: true, Metadata: fileblob.MetadataDontWrite})
		if err != nil {
			return nil, fmt.Errorf("history: destination %s: %w", d.Name, err)
		}
		return d, nil
	}
	u, _ := url.Parse(dest)
	switch u.Scheme {
	case memblob.Scheme:
		memBuckets.Lock()
		defer memBuckets.Unlock()
		if memBuckets.m == nil {
			memBuckets.m = map[string]*blob.Bucket{}
		}
		name := u.Host + u.Path
		if memBuckets.m[name] == nil {
			memBuckets.m[name] = memblob.OpenBucket(nil)
		}
		d.Bucket, d.shared = memBuckets.m[name], true
		return d, nil
	case fileblob.Scheme:
		d.Bucket, err = fileMux.OpenBucketURL(ctx, u)
	default:
		// The drivers take the bucket from the host and ignore the path:
		// the path is the prefix the files are written under.
		if p := strings.Trim(u.Path, "/"); p != "" {
			q := u.Query()
			if q.Has("prefix") {
				return nil, fmt.Errorf("history: destination %s: give the prefix as the URL's path or as ?prefix=, not both", d.Name)
			}
			q.Set("prefix", p+"/")
			u.Path, u.RawPath, u.RawQuery = "", "", q.Encode()
		}
		d.Bucket, err = blob.DefaultURLMux().OpenBucketURL(ctx, u)
	}
	if err != nil {
		return nil, fmt.Errorf("history: destination %s: %w", d.Name, err)
	}
	return d, nil
}

// DisplayName is dest without a URL's password.
func DisplayName(dest string) string {
	if !IsURL(dest) {
		return dest
	}
	u, err := url.Parse(dest)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}

// SplitFile splits the location of one exported file (a path, or a
// bucket URL whose path ends with the file's name) into its destination
// and the file's name there.
func SplitFile(file string) (dest, name string, err error) {
	if !IsURL(file) {
		dir, name := filepath.Split(file)
		if name == "" {
			return "", "", fmt.Errorf("%s: not a file", file)
		}
		if dir == "" {
			dir = "."
		}
		return dir, name, nil
	}
	u, err := url.Parse(file)
	if err != nil {
		return "", "", errors.New("the file's URL does not parse") // url's error quotes it, password and all
	}
	if u.Scheme == memblob.Scheme && !strings.Contains(strings.Trim(u.Path, "/"), "/") && u.Path != "" {
		// mem://NAME/file
		name = strings.Trim(u.Path, "/")
		u.Path = ""
		return u.String(), name, nil
	}
	dir, name := path.Split(u.Path)
	if name == "" {
		return "", "", fmt.Errorf("%s: the URL's path names no file", u.Redacted())
	}
	u.Path, u.RawPath = dir, ""
	if u.Scheme == fileblob.Scheme && u.Path == "" {
		u.Path = "/"
	}
	return u.String(), name, nil
}

// writeBlob writes key through fn and closes it: the object appears whole
// at Close, or not at all when fn fails (the write is aborted). On a local
// directory the file is synced before it is renamed into place.
func writeBlob(ctx context.Context, b *blob.Bucket, key, contentType string, fn func(io.Writer) error) error {
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	var local *os.File
	w, err := b.NewWriter(wctx, key, &blob.WriterOptions{ContentType: contentType,
		BeforeWrite: func(as func(any) bool) error {
			as(&local) // fileblob: the temporary file; other drivers: no-op
			return nil
		}})
	if err != nil {
		return err
	}
	if err := fn(w); err != nil {
		abort() // an aborted write leaves nothing at key
		_ = w.Close()
		return err
	}
	if local != nil {
		// A local directory: the bytes reach the disk before the file is
		// renamed into place (and the day's partition dropped after it).
		if err := local.Sync(); err != nil {
			abort()
			_ = w.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if local != nil {
		// The temporary file was beside the final one: sync the directory
		// that now holds the new name.
		return syncDir(filepath.Dir(local.Name()))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// checksum is the sha256 and size of key's bytes.
func checksum(ctx context.Context, b *blob.Bucket, key string) (string, int64, error) {
	r, err := b.NewReader(ctx, key, nil)
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// notFound reports whether err says a key is missing.
func notFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }
