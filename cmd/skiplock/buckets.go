//go:build skiplock_cloud

package main

// The bucket driver of `history export --to URL`, `history import URL` and
// `work --history-export-dir URL` beyond the library's own file:// and
// mem://: S3 (s3://bucket/prefix?region=…), and through it every
// S3-compatible store (MinIO, Cloudflare R2, Ceph, Google Cloud Storage's
// interoperability endpoint: &endpoint=…&s3ForcePathStyle=true), when the
// CLI is built with the tag skiplock_cloud, as the release archives and
// the container image are (.goreleaser.yaml):
//
//	go install -tags skiplock_cloud github.com/skiplock/skiplock/cmd/skiplock@latest
//
// Behind a tag, and S3's alone: the S3, GCS and Azure SDKs together
// doubled the binary (53 to 108 MB) and its cold build (73 to 145 s here),
// which every test binary of this package and CI's release check paid
// for. A Go program reaches gs:// or azblob:// by importing
// gocloud.dev/blob/gcsblob or azureblob itself. The driver reads its
// credentials from the usual environment (AWS_* or ~/.aws), never the URL.
import (
	_ "gocloud.dev/blob/s3blob" // s3://bucket/prefix?region=…
)
