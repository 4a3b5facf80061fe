#!/usr/bin/env bash
# Fetches the web console's vendored JavaScript (xterm.js and its fit addon, for the terminal page) from
# the npm registry at the pinned versions below, checks each package against its pinned sha512, and
# copies the built files the console serves, with their licenses, into internal/console/assets/vendor/.
# The sources of those files are the npm packages named here. To update: change a version and its
# integrity (npm view PACKAGE@VERSION dist.integrity), run this, test the terminal page
# (go test -run '^TestConsole$' ./internal/e2e/) and commit the result with the new versions in
# vendor/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/internal/console/assets/vendor"

# package  version  integrity  files to copy (path in the package -> name in vendor/)
packages=(
  "@xterm/xterm 6.0.0 sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg== lib/xterm.js:xterm.js css/xterm.css:xterm.css LICENSE:xterm.LICENSE"
  "@xterm/addon-fit 0.11.0 sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g== lib/addon-fit.js:addon-fit.js LICENSE:addon-fit.LICENSE"
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
for entry in "${packages[@]}"; do
  read -r name version integrity files <<<"$entry"
  tgz=$(cd "$tmp" && npm pack --silent "$name@$version")
  got="sha512-$(openssl dgst -sha512 -binary "$tmp/$tgz" | base64 -w0)"
  if [ "$got" != "$integrity" ]; then
    echo "$name@$version: integrity $got, want $integrity" >&2
    exit 1
  fi
  dir="$tmp/${tgz%.tgz}"
  mkdir -p "$dir"
  tar -xzf "$tmp/$tgz" -C "$dir"
  for f in $files; do
    cp "$dir/package/${f%%:*}" "$out/${f#*:}"
  done
  echo "$name@$version: copied ${files}"
done
