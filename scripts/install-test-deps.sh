#!/usr/bin/env bash
# Installs what the browser and web-client tests need beyond the Python
# packages: Debian's Chromium (driven by Playwright for Python, which comes
# from the `test` extra), the web client's npm packages (web/node_modules) and
# its build (web/types, web/dist: `npm ci` runs the package's `dependencies` script),
# Node.js 22 from npm for the web package's tests (tests/web/node22),
# systemd-analyze, which checks the unit file in deploy/, and openssl, which
# reads the router's identity certificate in tests/server/test_identity.py; PostgreSQL
# (Debian's postgresql), which tests start privately for the postgres store, and its
# JDBC driver (libpostgresql-jdbc-java: /usr/share/java/postgresql.jar), through which
# `smp-pipeline stats --db` reads a router's postgres store with Spark; a Java
# runtime for Spark (Debian's default-jre-headless, Java 17) where none is; and, when
# ../shared/upstream holds it, upstream's browser SMP client, built unmodified into a
# cache outside the repository for tests/upstream (scripts/build-upstream-web-client.sh).
# Run as root on Debian; idempotent, so CI runs it every time.
set -euo pipefail
cd "$(dirname "$0")/.."

CHROMIUM=/usr/bin/chromium
missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
command -v npm >/dev/null || missing+=(nodejs npm)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v openssl >/dev/null || missing+=(openssl)
ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || missing+=(postgresql)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v java >/dev/null || missing+=(default-jre-headless)

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-test-deps: missing ${missing[*]}; run this script as root to install them" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi
npm ci --prefix web --no-audit --no-fund --loglevel=error
npm ci --prefix tests/web/node22 --no-audit --no-fund --loglevel=error
if ls ../shared/upstream/simplexmq-smp-web-*.tar.gz >/dev/null 2>&1; then
    scripts/build-upstream-web-client.sh ../shared/upstream >/dev/null
fi
