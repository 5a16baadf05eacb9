#!/bin/sh
# A base image for deploy/Dockerfile built from Debian's packages, for build hosts that reach a Debian
# mirror and a Python package index but not Docker Hub (where python:3.11-slim lives): Debian 12
# (bookworm) with its Python 3.11 in a virtual environment at /opt/python, first on the PATH, so that
# `pip install` in the Dockerfile installs there. The build host's certificate authorities are copied
# in (a site's TLS proxy in front of its package index is then trusted during the build).
#
# Usage, as root on a host with debootstrap and a Docker daemon:
#   deploy/debian_base.sh [TAG] [MIRROR]        TAG: microagg-base:bookworm, MIRROR: deb.debian.org
#   docker build --network host -f deploy/Dockerfile --build-arg BASE_IMAGE=microagg-base:bookworm \
#       -t microagg:0.1.0 .
set -eu

tag=${1:-microagg-base:bookworm}
mirror=${2:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT INT TERM

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror"
chroot "$root" python3 -m venv /opt/python
chroot "$root" /opt/python/bin/python -m pip --version
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin

tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$tag"
echo "built $tag"
