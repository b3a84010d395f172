#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need (etcd, protoc) via
# scripts/install-deps.sh when present, then every test of every crate with every feature (so the
# backend conformance suite and the etcd backend tests run), then the docs with warnings denied.
# Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "$0")/.."

if [[ -x scripts/install-deps.sh ]]; then
    echo "==> scripts/install-deps.sh"
    scripts/install-deps.sh
elif [[ -f scripts/install-deps.sh ]]; then
    echo "==> bash scripts/install-deps.sh"
    bash scripts/install-deps.sh
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "==> cargo test --workspace --all-features"
# Keep cargo's full output on screen and its summary lines for the end.
if ! cargo test --workspace --all-features 2>&1 | tee "$log"; then
    echo "FAILED: cargo test --workspace --all-features" >&2
    grep -E '^(test result:|error|failures:)' "$log" >&2 || true
    exit 1
fi

echo "==> cargo doc --workspace --no-deps (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

echo "==> summary"
grep -E '^test result:' "$log" | awk '
    { print; passed += $4; failed += $6; ignored += $8 }
    END { printf "total: %d passed, %d failed, %d ignored\n", passed, failed, ignored }'
