#!/usr/bin/env bash
# System packages the full test suite uses, installed when missing (best effort: the tests that need one skip,
# saying so, where it cannot be installed). `make test` runs this; so does .ci/run through make test.
set -uo pipefail
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)      # renders the chart to SVG/PNG (DOT-output tests)
command -v chromium >/dev/null 2>&1 || missing+=(chromium) # tests/test_view.py drives it headless (no browser download)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo="sudo -n"
echo "installing ${missing[*]} (apt-get)"
if ! ($sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null); then
  echo "warning: could not install ${missing[*]}; the tests that need them will skip"
fi
exit 0
