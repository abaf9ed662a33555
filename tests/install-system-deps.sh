#!/usr/bin/env sh
# Installs what the test suite needs beyond pip: Debian's chromium, which the chat page's browser
# test drives through Playwright, and espeak-ng, which speaks the Telegram channel's voice messages.
# Installs only what is missing; uses sudo when not root.
set -eu
chromium="${CHROMIUM:-/usr/bin/chromium}"
missing=""
if [ ! -x "$chromium" ]; then
    missing="$missing chromium"
fi
if ! command -v espeak-ng >/dev/null 2>&1; then
    missing="$missing espeak-ng"
fi
if [ -z "$missing" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
else
    as_root="sudo"
fi
$as_root apt-get update
# shellcheck disable=SC2086 # one word per package
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
