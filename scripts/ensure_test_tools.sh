#!/bin/sh
# Installs, from the system's apt repositories, the tools the test suite runs besides Python:
# Docker Compose (tests/project/test_docker.py checks docker/compose.yaml with it) and Chromium (the
# admin's browser test). Only what is missing, quietly; nothing when both are there.
# Compose is either Docker's v2 plugin ("docker compose") or, from Debian, docker-compose (v1).
set -eu

missing=""
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    missing="$missing docker-compose"
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    missing="$missing chromium"
fi
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
echo "installing from apt:$missing"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086  # one word per package
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
