//go:build skiplock_cloud

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

// Built with skiplock_cloud (as released), the binary links the cloud
// drivers in, so --to s3://, gs:// and azblob:// reach a bucket instead of
// "no driver" (opening one needs the cloud, which tests here do not reach).
func TestHistoryBucketDriversLinked(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"s3", "gs", "azblob"} {
		require.True(t, blob.DefaultURLMux().ValidBucketScheme(scheme), scheme)
	}
}
