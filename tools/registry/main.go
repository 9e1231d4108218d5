// The OCI registry the real nodes pull from: distribution v3.1.2's own command
// (registry.RootCmd, as its cmd/registry runs it) with only what the nodes use: the
// filesystem storage driver and htpasswd authentication. Its cmd/registry also links the
// Azure, GCS and S3 drivers, the pull-through proxy and the token and silly
// authenticators, whose SDKs were most of its build (tools/build_images.sh times it).
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// Execute exits the process itself on an error, with the error's message.
	_ = registry.RootCmd.Execute()
}
