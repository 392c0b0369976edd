//go:build !race

package shard

// raceBuild is true when the tests run under the race detector.
const raceBuild = false
