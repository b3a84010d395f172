#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine (run as root):
#   - etcd-server: the etcd backend's tests start their own /usr/bin/etcd on loopback;
#   - protobuf-compiler: the etcd-client crate's build script compiles etcd's .proto files with
#     protoc (its protos import nothing else, so no well-known-type headers are needed); cosi-api
#     needs none (it builds with the protoc the protoc-bin-vendored crate carries);
#   - iproute2: the netlink backend's tests create network namespaces and veth pairs with `ip`.
# Idempotent and quiet: prints nothing and changes nothing when all are present; runs
# `apt-get update` only when the package lists are missing or do not know a package.
set -euo pipefail

missing=()
[[ -x /usr/bin/etcd ]] || missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
(( ${#missing[@]} == 0 )) && exit 0

if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# The tests start their own etcd on free ports; keep the package from starting a system one.
export RUNLEVEL=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT

known() {
    local package
    for package in "${missing[@]}"; do
        apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]' || return 1
    done
}

if ! known; then
    apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
if ! apt-get install -y -qq "${missing[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    echo "install-deps: apt-get install ${missing[*]} failed" >&2
    exit 1
fi
echo "install-deps: installed ${missing[*]}"
