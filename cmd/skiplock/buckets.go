package main

// The bucket drivers of `history export --to URL`, `history import URL` and
// `work --history-export-dir URL`: the library opens file:// and mem://
// itself and any scheme whose driver the program links in, so the CLI links
// the three clouds' in. Each reads its credentials from its usual
// environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*).
import (
	_ "gocloud.dev/blob/azureblob" // azblob://container/prefix
	_ "gocloud.dev/blob/gcsblob"   // gs://bucket/prefix
	_ "gocloud.dev/blob/s3blob"    // s3://bucket/prefix?region=…
)
