//go:build skiplock_cloud

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

// Built with skiplock_cloud (as released), the binary links the S3 driver
// in, so --to s3:// reaches a bucket instead of "no driver" (opening one
// needs the cloud, which tests here do not reach).
func TestHistoryBucketDriversLinked(t *testing.T) {
	t.Parallel()
	require.True(t, blob.DefaultURLMux().ValidBucketScheme("s3"))
}
