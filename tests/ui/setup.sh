#!/usr/bin/env bash
# Prepare the browser stage: Debian's chromium (Playwright's own browser download is not possible).
# Exit 77 (skip) with a visible message when chromium is missing and cannot be installed.
set -u
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
echo "==> browser stage: chromium is missing; installing Debian's 'chromium' package with apt-get"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "==> SKIPPING the browser stage: no root apt-get here to install chromium (install it and rerun make test-ui)"
  exit 77
fi
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
  echo "==> SKIPPING the browser stage: apt-get could not install chromium (no access to Debian's packages?)"
  exit 77
fi
echo "==> installed $(chromium --version 2>/dev/null)"
