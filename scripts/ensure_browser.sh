#!/usr/bin/env bash
# Install Debian's Chromium for the browser test of the library viewer (tests/experience/test_viewer_browser.py),
# only when no Chromium is on PATH and apt-get can install it (as root). Never fails the build: without it the
# browser tests skip and say why.
set -uo pipefail

for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
        exit 0
    fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "[ensure_browser] no Chromium and no apt-get: the browser tests will skip" >&2
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "[ensure_browser] no Chromium; installing it needs root (sudo apt-get install chromium): the browser tests will skip" >&2
    exit 0
fi
echo "[ensure_browser] installing Debian's chromium (apt-get)" >&2
if ! { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; then
    echo "[ensure_browser] apt-get could not install chromium: the browser tests will skip" >&2
fi
exit 0
