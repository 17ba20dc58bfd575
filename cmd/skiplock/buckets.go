//go:build skiplock_cloud

package main

// The bucket drivers of `history export --to URL`, `history import URL` and
// `work --history-export-dir URL`: the library opens file:// and mem://
// itself and any scheme whose driver the program links in, so the CLI links
// the three clouds' in when built with the tag skiplock_cloud, as the
// release archives and the container image are (.goreleaser.yaml):
//
//	go install -tags skiplock_cloud github.com/skiplock/skiplock/cmd/skiplock@latest
//
// Behind a tag because the three SDKs double the binary (53 to 108 MB) and
// its cold build (73 to 145 s here), which every test binary of this
// package paid for. Each driver reads its credentials from its usual
// environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*).
import (
	_ "gocloud.dev/blob/azureblob" // azblob://container/prefix
	_ "gocloud.dev/blob/gcsblob"   // gs://bucket/prefix
	_ "gocloud.dev/blob/s3blob"    // s3://bucket/prefix?region=…
)
