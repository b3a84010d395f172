#!/usr/bin/env bash
# Wire compatibility with the reference runtime (cosi-api's `interop` test): the reference
# client's 33 steps against this project's State server (h2c and mutual TLS), and RemoteState
# against the reference server. It needs the reference's binary, ../shared/peer/cosi-go-interop
# (relative to the repository root; COSI_PEER_DIR overrides). Where that is absent the check
# says so loudly and is NOT counted as passed: it exits 2 ("not run"), or 1 when CI=true, where
# the peer is expected to be present.
set -euo pipefail

cd "$(dirname "$0")/.."

# Beside the repository; a worktree one level further down (wt/NAME) finds it beside its parent.
peer="${COSI_PEER_DIR:-$(pwd)/../shared/peer}"
if [[ -z "${COSI_PEER_DIR:-}" && ! -x "$peer/cosi-go-interop" && -x "$(pwd)/../../shared/peer/cosi-go-interop" ]]; then
    peer="$(pwd)/../../shared/peer"
fi
if [[ ! -x "$peer/cosi-go-interop" ]]; then
    echo "################################################################################" >&2
    echo "# interop: NOT RUN: $peer/cosi-go-interop is absent." >&2
    echo "# Wire compatibility with the reference runtime was NOT checked and is NOT passed." >&2
    echo "################################################################################" >&2
    if [[ "${CI:-}" == "true" ]]; then
        exit 1
    fi
    exit 2
fi

export COSI_PEER_DIR="$peer"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The workspace's feature set, as scripts/test.sh builds it, so the libraries it built are reused
# rather than built again for cosi-api's own feature set.
if ! cargo test --workspace --all-features --test interop 2>&1 | tee "$out"; then
    echo "interop: FAILED" >&2
    exit 1
fi
# The harness prints its own libtest-style summary; no summary means it ran nothing.
if ! grep -qE '^test result: ok\. [1-9][0-9]* passed; 0 failed' "$out"; then
    echo "interop: the check ran no test" >&2
    exit 1
fi
echo "interop: passed"
