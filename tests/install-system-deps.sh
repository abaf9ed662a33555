#!/usr/bin/env sh
# Installs what the test suite needs beyond pip: Debian's chromium, which the chat page's browser
# test drives through Playwright. Does nothing when it is already installed; uses sudo when not root.
set -eu
chromium="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$chromium" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
else
    as_root="sudo"
fi
$as_root apt-get update
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
