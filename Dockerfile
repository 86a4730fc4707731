# The image `cadre deploy k8s --image` names: Debian bookworm with the packages
# scripts/setup.sh installs (tests/deploy/dockerfile_test.py keeps the two lists equal) and the
# `cadre` binary built from this checkout, on PATH, with the tokenizer shim beside it
# (/opt/cadre/lib, where cadre looks for it).
#   docker build -t REGISTRY/cadre:TAG . && docker push REGISTRY/cadre:TAG
#   cadre deploy k8s --config job.yaml --image REGISTRY/cadre:TAG ...
FROM debian:bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ninja-build \
      libtorch-dev python3-torch libopenblas0-openmp \
      python3-torchvision \
      libdnnl-dev \
      libgloo-dev \
      libblas3 util-linux \
      libsentencepiece-dev sentencepiece \
      nlohmann-json3-dev libyaml-cpp-dev libcpp-httplib-dev \
      libgtest-dev libgmock-dev libbenchmark-dev \
      python3-matplotlib python3-numpy \
      slurm-wlm munge \
      etcd-server etcd-client \
      iproute2 iptables \
      prometheus tmux chromium python3-pil \
      libssl-dev \
      libturbojpeg0-dev libpng-dev \
      clang-14 libclang-rt-14-dev \
      python3-venv \
 && rm -rf /var/lib/apt/lists/*

# libtorch must use OpenBLAS, not the reference BLAS (about 30x slower), as setup.sh makes sure.
RUN update-alternatives --set libblas.so.3-x86_64-linux-gnu \
      "$(update-alternatives --list libblas.so.3-x86_64-linux-gnu | grep openblas | head -1)"

# The whole checkout (CMake reads cmake/, include/ and src/); .dockerignore leaves out builds and data.
COPY . /src
COPY configs /opt/cadre/configs
RUN cmake -S /src -B /tmp/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF -DCADRE_BENCH=OFF \
 && cmake --build /tmp/build --target cadre \
 && install -D -m 755 /tmp/build/bin/cadre /opt/cadre/bin/cadre \
 && install -D -m 755 /tmp/build/lib/libcadre_spm.so /opt/cadre/lib/libcadre_spm.so \
 && ln -s /opt/cadre/bin/cadre /usr/local/bin/cadre \
 && rm -rf /tmp/build /src \
 && cadre --help >/dev/null

# The manifests mount the shared volume here and start in it.
WORKDIR /workspace
