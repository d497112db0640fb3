// Package buildinfo is what a consumerd binary knows of its own build (the
// main module's version, VCS commit and time, Go version, from
// runtime/debug.ReadBuildInfo): `--version` prints Current, the member spec
// announces Current.Version, /v1/status reports both, and the gauge
// consumerd_build_info carries them as labels (registered when the package
// loads, so every member's /metrics serves it).
package buildinfo
